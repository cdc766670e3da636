#include "cuda/kernels/compression.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "cuda/kernels/block_reduce.cuh"
#include "cuda/check/check_cuda.h"
#include "model/rng.h"

namespace vitddp {
namespace {

constexpr int kThreads = 256;

/// Blocks for a grid-stride loop over n elements (at least 1, at most 8192).
unsigned grid_for(size_t n) {
  const size_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max<size_t>(1, std::min<size_t>(b, 8192)));
}

#define GRID_STRIDE(i, n) \
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

// The 16-bit payload types as raw bits: T is DType::F16 or DType::BF16 (round to nearest even).
template <DType T>
__device__ __forceinline__ uint16_t to16(float v) {
  if constexpr (T == DType::BF16) return __bfloat16_as_ushort(__float2bfloat16_rn(v));
  else return __half_as_ushort(__float2half_rn(v));
}
template <DType T>
__device__ __forceinline__ float from16(uint16_t h) {
  if constexpr (T == DType::BF16) return __bfloat162float(__ushort_as_bfloat16(h));
  else return __half2float(__ushort_as_half(h));
}

// Four elements per thread when both pointers are 16 / 8-byte aligned (bucket offsets are
// multiples of 4 elements), then the tail; element-wise the same arithmetic as one at a time.
template <DType T>
__global__ void to16_kernel(const float* __restrict__ x, size_t n, float divisor, uint16_t* __restrict__ out, bool vec) {
  const size_t n4 = vec ? n / 4 : 0;
  GRID_STRIDE(i, n4) {
    const float4 v = reinterpret_cast<const float4*>(x)[i];
    ushort4 o;
    o.x = to16<T>(v.x / divisor);
    o.y = to16<T>(v.y / divisor);
    o.z = to16<T>(v.z / divisor);
    o.w = to16<T>(v.w / divisor);
    reinterpret_cast<ushort4*>(out)[i] = o;
  }
  for (size_t i = 4 * n4 + blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    out[i] = to16<T>(x[i] / divisor);
}

template <DType T>
__global__ void from16_kernel(const uint16_t* __restrict__ h, size_t n, float* __restrict__ x, bool vec) {
  const size_t n4 = vec ? n / 4 : 0;
  GRID_STRIDE(i, n4) {
    const ushort4 v = reinterpret_cast<const ushort4*>(h)[i];
    reinterpret_cast<float4*>(x)[i] = make_float4(from16<T>(v.x), from16<T>(v.y), from16<T>(v.z), from16<T>(v.w));
  }
  for (size_t i = 4 * n4 + blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    x[i] = from16<T>(h[i]);
}

bool aligned(const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

__global__ void add_copy_kernel(float* __restrict__ x, const float* __restrict__ err, float* __restrict__ copy, size_t n) {
  GRID_STRIDE(i, n) {
    const float v = err ? x[i] + err[i] : x[i];
    x[i] = v;
    copy[i] = v;
  }
}

__global__ void subtract_kernel(const float* a, const float* b, float* out, size_t n) {
  GRID_STRIDE(i, n) out[i] = a[i] - b[i];
}

__global__ void divide_kernel(float* x, size_t n, float divisor) {
  GRID_STRIDE(i, n) x[i] = x[i] / divisor;
}

__global__ void copy_segments_kernel(const float* __restrict__ src, float* __restrict__ dst,
                                     const CopySegment* __restrict__ segs, int count, float divisor) {
  for (int s = blockIdx.y; s < count; s += gridDim.y) {
    const CopySegment sg = segs[s];
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < sg.len; i += (size_t)gridDim.x * blockDim.x) {
      const float v = src[sg.src_offset + i];
      dst[sg.dst_offset + i] = divisor == 1.0f ? v : v / divisor;
    }
  }
}

__global__ void fill_normal_kernel(float* x, size_t n, uint64_t seed, uint64_t stream_id) {
  GRID_STRIDE(i, n) x[i] = static_cast<float>(rand_normal(seed, stream_id, i));
}

// One block per matrix; every thread owns the same rows in every loop, so only the block sums
// synchronise.
__global__ void orthogonalize_kernel(float* base, const MatrixRef* __restrict__ mats, int count, float eps) {
  __shared__ float scratch[32];
  for (int mi = blockIdx.x; mi < count; mi += gridDim.x) {
    const MatrixRef mr = mats[mi];
    float* a = base + mr.offset;
    const int rows = mr.rows, cols = mr.cols;
    for (int i = 0; i < cols; ++i) {
      float ss = 0.0f;
      for (int k = threadIdx.x; k < rows; k += blockDim.x) {
        const float v = a[(size_t)k * cols + i];
        ss += v * v;
      }
      const float norm = sqrtf(block_sum(ss, scratch));
      const float d = eps == 0.0f ? norm : norm + eps;
      for (int k = threadIdx.x; k < rows; k += blockDim.x) a[(size_t)k * cols + i] /= d;
      for (int j = i + 1; j < cols; ++j) {
        float dot = 0.0f;
        for (int k = threadIdx.x; k < rows; k += blockDim.x) dot += a[(size_t)k * cols + i] * a[(size_t)k * cols + j];
        dot = block_sum(dot, scratch);
        for (int k = threadIdx.x; k < rows; k += blockDim.x) a[(size_t)k * cols + j] -= dot * a[(size_t)k * cols + i];
      }
    }
  }
}

constexpr int kMqWarps = kThreads / 32;

// One warp per row of M; columns of Q in chunks of 4.
__global__ void mq_kernel(const float* __restrict__ M, const float* __restrict__ Q, float* __restrict__ P, int n, int m,
                          int r) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int row = blockIdx.x * kMqWarps + warp;
  if (row >= n) return;  // uniform over the warp
  const float* mrow = M + (size_t)row * m;
  for (int j0 = 0; j0 < r; j0 += 4) {
    const int jn = min(4, r - j0);
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int k = lane; k < m; k += 32) {
      const float v = mrow[k];
      const float* q = Q + (size_t)k * r + j0;
#pragma unroll
      for (int jj = 0; jj < 4; ++jj)
        if (jj < jn) acc[jj] += v * q[jj];
    }
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
      const float s = warp_sum(acc[jj]);
      if (lane == 0 && jj < jn) P[(size_t)row * r + j0 + jj] = s;
    }
  }
}

constexpr int kMtpChunkRows = 128;
constexpr int kMtpCols = 32;
constexpr int kMtpRowThreads = 8;

// Block (32, 8): 32 columns of M, 8 threads down the rows of a 128-row chunk; partial sums of the
// chunk to partial[chunk][col][j].
__global__ void mtp_partial_kernel(const float* __restrict__ M, const float* __restrict__ P, int n, int m, int r,
                                   float* __restrict__ partial) {
  __shared__ float s[kMtpRowThreads][4][kMtpCols + 1];
  const int c = blockIdx.x * kMtpCols + threadIdx.x;
  const int r0 = blockIdx.y * kMtpChunkRows;
  const int r1 = min(n, r0 + kMtpChunkRows);
  for (int j0 = 0; j0 < r; j0 += 4) {
    const int jn = min(4, r - j0);
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (c < m)
      for (int i = r0 + threadIdx.y; i < r1; i += kMtpRowThreads) {
        const float v = M[(size_t)i * m + c];
        const float* p = P + (size_t)i * r + j0;
#pragma unroll
        for (int jj = 0; jj < 4; ++jj)
          if (jj < jn) acc[jj] += v * p[jj];
      }
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) s[threadIdx.y][jj][threadIdx.x] = acc[jj];
    __syncthreads();
    if (threadIdx.y == 0 && c < m) {
      for (int jj = 0; jj < jn; ++jj) {
        float t = 0.0f;
#pragma unroll
        for (int y = 0; y < kMtpRowThreads; ++y) t += s[y][jj][threadIdx.x];
        partial[((size_t)blockIdx.y * m + c) * r + j0 + jj] = t;
      }
    }
    __syncthreads();
  }
}

__global__ void mtp_final_kernel(const float* __restrict__ partial, int nchunks, size_t total, float* __restrict__ Q) {
  GRID_STRIDE(x, total) {
    float t = 0.0f;
    for (int c = 0; c < nchunks; ++c) t += partial[(size_t)c * total + x];
    Q[x] = t;
  }
}

__global__ void pqt_kernel(const float* __restrict__ P, const float* __restrict__ Q, float* __restrict__ M, int n, int m,
                           int r) {
  const size_t total = (size_t)n * m;
  GRID_STRIDE(idx, total) {
    const size_t i = idx / m, k = idx % m;
    float s = 0.0f;
    for (int j = 0; j < r; ++j) s += P[i * r + j] * Q[k * r + j];
    M[idx] = s;
  }
}

void check_matrix(const char* fn, int n, int m, int r) {
  if (n < 1 || m < 1 || r < 1)
    throw std::invalid_argument(std::string(fn) + ": bad sizes n=" + std::to_string(n) + " m=" + std::to_string(m) +
                                " r=" + std::to_string(r));
}

}  // namespace

void cast_to_16bit(const float* x, size_t n, float divisor, DType t, uint16_t* out, cudaStream_t stream) {
  require_16bit(t, "cast_to_16bit");
  if (n == 0) return;
  const bool vec = aligned(x, 16) && aligned(out, 8);
  auto* kernel = t == DType::BF16 ? to16_kernel<DType::BF16> : to16_kernel<DType::F16>;
  kernel<<<grid_for(vec ? n / 4 + 1 : n), kThreads, 0, stream>>>(x, n, divisor, out, vec);
  CUDA_CHECK_LAUNCH();
}

void cast_from_16bit(const uint16_t* h, size_t n, DType t, float* x, cudaStream_t stream) {
  require_16bit(t, "cast_from_16bit");
  if (n == 0) return;
  const bool vec = aligned(x, 16) && aligned(h, 8);
  auto* kernel = t == DType::BF16 ? from16_kernel<DType::BF16> : from16_kernel<DType::F16>;
  kernel<<<grid_for(vec ? n / 4 + 1 : n), kThreads, 0, stream>>>(h, n, x, vec);
  CUDA_CHECK_LAUNCH();
}

void add_error_and_copy(float* x, const float* err, float* copy, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  add_copy_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, err, copy, n);
  CUDA_CHECK_LAUNCH();
}

void subtract(const float* a, const float* b, float* out, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  subtract_kernel<<<grid_for(n), kThreads, 0, stream>>>(a, b, out, n);
  CUDA_CHECK_LAUNCH();
}

void divide(float* x, size_t n, float divisor, cudaStream_t stream) {
  if (n == 0) return;
  divide_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, n, divisor);
  CUDA_CHECK_LAUNCH();
}

void copy_segments(const float* src, float* dst, const CopySegment* segments, int count, size_t max_len,
                   float divisor, cudaStream_t stream) {
  if (count <= 0 || max_len == 0) return;
  const dim3 grid(std::min<unsigned>(grid_for(max_len), 1024u), static_cast<unsigned>(std::min(count, 65535)));
  copy_segments_kernel<<<grid, kThreads, 0, stream>>>(src, dst, segments, count, divisor);
  CUDA_CHECK_LAUNCH();
}

void fill_normal(float* x, size_t n, uint64_t seed, uint64_t stream_id, cudaStream_t stream) {
  if (n == 0) return;
  fill_normal_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, n, seed, stream_id);
  CUDA_CHECK_LAUNCH();
}

void orthogonalize_columns(float* base, const MatrixRef* matrices, int count, float epsilon, cudaStream_t stream) {
  if (count <= 0) return;
  orthogonalize_kernel<<<std::min(count, 65535), kThreads, 0, stream>>>(base, matrices, count, epsilon);
  CUDA_CHECK_LAUNCH();
}

void matmul_mq(const float* M, const float* Q, float* P, int n, int m, int r, cudaStream_t stream) {
  check_matrix("matmul_mq", n, m, r);
  mq_kernel<<<(n + kMqWarps - 1) / kMqWarps, kThreads, 0, stream>>>(M, Q, P, n, m, r);
  CUDA_CHECK_LAUNCH();
}

size_t matmul_mtp_scratch_floats(int n, int m, int r) {
  if (n < 1 || m < 1 || r < 1) return 0;
  const size_t nchunks = (size_t)(n + kMtpChunkRows - 1) / kMtpChunkRows;
  return nchunks * (size_t)m * (size_t)r;
}

void matmul_mtp(const float* M, const float* P, float* Q, int n, int m, int r, float* scratch, cudaStream_t stream) {
  check_matrix("matmul_mtp", n, m, r);
  const int nchunks = (n + kMtpChunkRows - 1) / kMtpChunkRows;
  if (nchunks > 65535) throw std::invalid_argument("matmul_mtp: too many rows (" + std::to_string(n) + ")");
  const dim3 grid((m + kMtpCols - 1) / kMtpCols, nchunks);
  mtp_partial_kernel<<<grid, dim3(kMtpCols, kMtpRowThreads), 0, stream>>>(M, P, n, m, r, scratch);
  CUDA_CHECK_LAUNCH();
  const size_t total = (size_t)m * r;
  mtp_final_kernel<<<grid_for(total), kThreads, 0, stream>>>(scratch, nchunks, total, Q);
  CUDA_CHECK_LAUNCH();
}

void matmul_pqt(const float* P, const float* Q, float* M, int n, int m, int r, cudaStream_t stream) {
  check_matrix("matmul_pqt", n, m, r);
  pqt_kernel<<<grid_for((size_t)n * m), kThreads, 0, stream>>>(P, Q, M, n, m, r);
  CUDA_CHECK_LAUNCH();
}

}  // namespace vitddp
