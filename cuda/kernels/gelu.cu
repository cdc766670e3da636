#include "cuda/kernels/gelu.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "cuda/check/check_cuda.h"
#include "cuda/kernels/reduce.h"
#include "cuda/kernels/vec4.cuh"

namespace vitddp {
namespace {

constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;

// Rounded operations (no contraction into FMAs), so that every kernel that inlines it - forward,
// and the backward that recomputes the activation (gelu_backward_bias's y) - gives the same bits.
__device__ __forceinline__ float gelu(float u) {
  return __fmul_rn(__fmul_rn(0.5f, u), __fadd_rn(1.0f, erff(__fmul_rn(u, kInvSqrt2))));
}

__device__ __forceinline__ float gelu_grad(float u) {
  const float cdf = 0.5f * (1.0f + erff(u * kInvSqrt2));
  const float pdf = kInvSqrt2Pi * expf(-0.5f * u * u);
  return fmaf(u, pdf, cdf);
}

// gelu_grad for the bf16 kernels, whose product with dy is rounded to bf16 (8-bit significand):
// Phi(u) from erf by Abramowitz and Stegun's 7.1.26 (|error| <= 1.5e-7 for erf, so <= 7.5e-8 for
// Phi), whose exp(-x^2) at x = u / sqrt(2) is the density's exp(-u^2 / 2): one exponential and an
// approximate reciprocal instead of erff's polynomial and a second exponential.
__device__ __forceinline__ float gelu_grad_bf16(float u) {
  const float e = expf(-0.5f * u * u);
  const float t = __fdividef(1.0f, fmaf(0.3275911f * kInvSqrt2, fabsf(u), 1.0f));
  float q = fmaf(1.061405429f, t, -1.453152027f);
  q = fmaf(q, t, 1.421413741f);
  q = fmaf(q, t, -0.284496736f);
  q = fmaf(q, t, 0.254829592f);
  const float tail = 0.5f * q * t * e;  // 1 - Phi(|u|)
  const float cdf = u >= 0.0f ? 1.0f - tail : tail;
  return fmaf(u, kInvSqrt2Pi * e, cdf);
}

// Vectorised bodies (float4) when n and every pointer allow it; scalar tails otherwise.
__global__ void gelu_forward_kernel(const float* u, float* y, size_t n, bool vec4) {
  grid_stride<4>(
      n, vec4,
      [=](size_t i) {
        float4 v = reinterpret_cast<const float4*>(u)[i];
        v.x = gelu(v.x);
        v.y = gelu(v.y);
        v.z = gelu(v.z);
        v.w = gelu(v.w);
        reinterpret_cast<float4*>(y)[i] = v;
      },
      [=](size_t e) { y[e] = gelu(u[e]); });
}

__global__ void gelu_backward_kernel(const float* dy, const float* u, float* du, size_t n,
                                     bool vec4) {
  grid_stride<4>(
      n, vec4,
      [=](size_t i) {
        const float4 g = reinterpret_cast<const float4*>(dy)[i];
        const float4 v = reinterpret_cast<const float4*>(u)[i];
        float4 r;
        r.x = g.x * gelu_grad(v.x);
        r.y = g.y * gelu_grad(v.y);
        r.z = g.z * gelu_grad(v.z);
        r.w = g.w * gelu_grad(v.w);
        reinterpret_cast<float4*>(du)[i] = r;
      },
      [=](size_t e) { du[e] = dy[e] * gelu_grad(u[e]); });
}

// bf16: 8 values (16 bytes) per vector access.
union Pack8 {
  uint4 u;
  __nv_bfloat162 h[4];
};

__global__ void gelu_forward_bf16_kernel(const __nv_bfloat16* u, __nv_bfloat16* y, size_t n,
                                         bool vec8) {
  grid_stride<8>(
      n, vec8,
      [=](size_t i) {
        Pack8 v;
        v.u = reinterpret_cast<const uint4*>(u)[i];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float2 f = __bfloat1622float2(v.h[j]);
          v.h[j] = __floats2bfloat162_rn(gelu(f.x), gelu(f.y));
        }
        reinterpret_cast<uint4*>(y)[i] = v.u;
      },
      [=](size_t e) { y[e] = __float2bfloat16_rn(gelu(__bfloat162float(u[e]))); });
}

__global__ void gelu_backward_bf16_kernel(const __nv_bfloat16* dy, const __nv_bfloat16* u,
                                          __nv_bfloat16* du, size_t n, bool vec8) {
  grid_stride<8>(
      n, vec8,
      [=](size_t i) {
        Pack8 g, v, r;
        g.u = reinterpret_cast<const uint4*>(dy)[i];
        v.u = reinterpret_cast<const uint4*>(u)[i];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float2 gf = __bfloat1622float2(g.h[j]), vf = __bfloat1622float2(v.h[j]);
          r.h[j] = __floats2bfloat162_rn(gf.x * gelu_grad_bf16(vf.x), gf.y * gelu_grad_bf16(vf.y));
        }
        reinterpret_cast<uint4*>(du)[i] = r.u;
      },
      [=](size_t e) { du[e] = __float2bfloat16_rn(__bfloat162float(dy[e]) * gelu_grad_bf16(__bfloat162float(u[e]))); });
}

// gelu_backward_bias: thread (x, y) of a (kGbThreads, kGbGroups) block owns 8 contiguous columns
// (one 16-byte bf16 or two fp32 accesses) of gb_batch rows a pass, all loaded before any store (du
// may alias dy, element for element), so each thread makes one round trip to memory a pass; after
// gb_passes passes the kGbGroups row groups' column sums are added in shared memory in a fixed
// order. A block covers kGbThreads x 8 columns and kGbGroups x gb_batch x gb_passes rows. (A first
// version, 128 x 1 threads walking 16 rows in 4 batches, took 31 us under ncu for 1600 x 4096 bf16,
// against 17 us for gelu_backward.)
// Rows a thread: 2 for bf16 storage (64 registers with gelu_grad_bf16: 4 blocks an SM; against 4
// rows, steps/s 1.005x on vit_b_16 and 1.008x on vit_l_32, H100, results/h100/gelu-backward-bf16),
// 4 for fp32 storage. With bf16 storage a block makes 4 passes over its kGbGroups x 2 rows, its
// threads' sums carried in registers from pass to pass, so it writes one row of partial sums per
// 32 rows instead of per 8, a quarter of the partials (9.7 MB a launch on vit_b_16 before) for
// column_sum_partials to read: steps/s 1.011x on vit_b_16, 1.009x on vit_l_16 and 1.011x on
// vit_l_32 (H100, results/h100/gelu-backward-bias-passes).
constexpr int kGbThreads = 64, kGbVec = 8, kGbGroups = 4;
template <typename T>
constexpr int gb_batch() {  // rows a thread
  return sizeof(T) == 2 ? 2 : 4;
}
template <typename T>
constexpr int gb_passes() {  // passes a block makes over kGbGroups x gb_batch rows
  return sizeof(T) == 2 ? 4 : 1;
}
template <typename T>
constexpr int gb_rows() {  // rows a block
  return kGbGroups * gb_batch<T>() * gb_passes<T>();
}

__device__ __forceinline__ void load8(const float* p, float (&v)[8]) {
  const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ void load8(const __nv_bfloat16* p, float (&v)[8]) {
  Pack8 q;
  q.u = *reinterpret_cast<const uint4*>(p);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 f = __bfloat1622float2(q.h[j]);
    v[2 * j] = f.x, v[2 * j + 1] = f.y;
  }
}
// Stores v and leaves in v what was stored (bf16: the rounded values).
__device__ __forceinline__ void store8(float* p, float (&v)[8]) {
  reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
  reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
}
__device__ __forceinline__ void store8(__nv_bfloat16* p, float (&v)[8]) {
  Pack8 q;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    q.h[j] = __floats2bfloat162_rn(v[2 * j], v[2 * j + 1]);
    v[2 * j] = __low2float(q.h[j]), v[2 * j + 1] = __high2float(q.h[j]);
  }
  *reinterpret_cast<uint4*>(p) = q.u;
}

template <typename T>
__global__ void gelu_backward_bias_kernel(const T* dy, const T* u, T* du, T* y, int rows, int cols,
                                          float* __restrict__ partial) {
  __shared__ float sums[kGbGroups][kGbThreads * kGbVec];
  const int c0 = (blockIdx.x * kGbThreads + threadIdx.x) * kGbVec;
  constexpr int kBatch = gb_batch<T>();
  const bool in_c = c0 < cols;
  float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 1
  for (int pass = 0; pass < gb_passes<T>(); ++pass) {
    const int r0 = blockIdx.y * gb_rows<T>() + (pass * kGbGroups + threadIdx.y) * kBatch, r1 = min(rows, r0 + kBatch);
    float g[kBatch][8], v[kBatch][8];
#pragma unroll
    for (int b = 0; b < kBatch; ++b)
      if (in_c && r0 + b < r1) {
        load8(dy + (size_t)(r0 + b) * cols + c0, g[b]);
        load8(u + (size_t)(r0 + b) * cols + c0, v[b]);
      }
#pragma unroll
    for (int b = 0; b < kBatch; ++b)
      if (in_c && r0 + b < r1) {
        if (y != nullptr) {  // the forward's GELU(u), recomputed (same function, same bits)
          float f[8];
#pragma unroll
          for (int j = 0; j < 8; ++j) f[j] = gelu(v[b][j]);
          store8(y + (size_t)(r0 + b) * cols + c0, f);
        }
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          if constexpr (std::is_same_v<T, __nv_bfloat16>)
            g[b][j] *= gelu_grad_bf16(v[b][j]);
          else
            g[b][j] *= gelu_grad(v[b][j]);
        }
        store8(du + (size_t)(r0 + b) * cols + c0, g[b]);
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[j] += g[b][j];
      }
  }
#pragma unroll
  for (int j = 0; j < 8; ++j) sums[threadIdx.y][threadIdx.x * kGbVec + j] = acc[j];
  __syncthreads();
  if (threadIdx.y == 0 && in_c) {
#pragma unroll
    for (int k = 1; k < kGbGroups; ++k)
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[j] += sums[k][threadIdx.x * kGbVec + j];
    store8(partial + (size_t)blockIdx.y * cols + c0, acc);
  }
}

template <typename T>
void gelu_backward_bias_impl(const T* dy, const T* u, T* du, int rows, int cols, float* db, bool accumulate,
                             float* scratch, T* y, cudaStream_t stream) {
  if (rows < 0 || cols < 0)
    throw std::invalid_argument("gelu_backward_bias: bad shape rows=" + std::to_string(rows) +
                                " cols=" + std::to_string(cols));
  if (cols == 0) return;
  const int nchunks = (rows + gb_rows<T>() - 1) / gb_rows<T>();
  const bool fused = cols % kGbVec == 0 && aligned16(dy) && aligned16(u) && aligned16(du) && aligned16(scratch) &&
                     nchunks <= 65535;  // 65535: the grid's y limit
  // y by gelu_forward where the fused kernel cannot write it; du and db keep their path (and bits).
  if (y != nullptr && (!fused || !aligned16(y))) {
    gelu_forward(u, y, (size_t)rows * cols, stream);
    y = nullptr;
  }
  if (!fused) {
    gelu_backward(dy, u, du, (size_t)rows * cols, stream);
    column_sum(du, rows, cols, cols, db, accumulate, scratch, stream);
    return;
  }
  if (nchunks > 0) {
    const dim3 grid((cols / kGbVec + kGbThreads - 1) / kGbThreads, nchunks);
    gelu_backward_bias_kernel<T><<<grid, dim3(kGbThreads, kGbGroups), 0, stream>>>(dy, u, du, y, rows, cols, scratch);
    CUDA_CHECK_LAUNCH();
  }
  column_sum_partials(scratch, nchunks, cols, db, accumulate, stream);
}

int grid_for(size_t n, int threads) {
  return static_cast<int>(std::max<size_t>(1, std::min<size_t>((n + threads - 1) / threads, 132 * 32)));
}

}  // namespace

void gelu_forward(const float* u, float* y, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  const bool vec4 = aligned16(u) && aligned16(y);
  gelu_forward_kernel<<<grid_for(vec4 ? n / 4 + 1 : n, 256), 256, 0, stream>>>(u, y, n, vec4);
  CUDA_CHECK_LAUNCH();
}

void gelu_backward(const float* dy, const float* u, float* du, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  const bool vec4 = aligned16(dy) && aligned16(u) && aligned16(du);
  gelu_backward_kernel<<<grid_for(vec4 ? n / 4 + 1 : n, 256), 256, 0, stream>>>(dy, u, du, n, vec4);
  CUDA_CHECK_LAUNCH();
}

void gelu_forward(const __nv_bfloat16* u, __nv_bfloat16* y, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  const bool vec8 = aligned16(u) && aligned16(y);
  gelu_forward_bf16_kernel<<<grid_for(vec8 ? n / 8 + 1 : n, 256), 256, 0, stream>>>(u, y, n, vec8);
  CUDA_CHECK_LAUNCH();
}

void gelu_backward(const __nv_bfloat16* dy, const __nv_bfloat16* u, __nv_bfloat16* du, size_t n,
                   cudaStream_t stream) {
  if (n == 0) return;
  const bool vec8 = aligned16(dy) && aligned16(u) && aligned16(du);
  gelu_backward_bf16_kernel<<<grid_for(vec8 ? n / 8 + 1 : n, 256), 256, 0, stream>>>(dy, u, du, n,
                                                                                      vec8);
  CUDA_CHECK_LAUNCH();
}

size_t gelu_backward_bias_scratch_floats(int rows, int cols, bool bf16_storage) {
  if (rows <= 0 || cols <= 0) return 0;
  // The fused kernel's partials, or column_sum's when the shape takes the unfused path.
  const int block_rows = bf16_storage ? gb_rows<__nv_bfloat16>() : gb_rows<float>();
  const size_t chunks = (size_t)((rows + block_rows - 1) / block_rows);
  return std::max(chunks * cols, column_sum_scratch_floats(rows, cols));
}

void gelu_backward_bias(const float* dy, const float* u, float* du, int rows, int cols, float* db,
                        bool accumulate, float* scratch, cudaStream_t stream, float* y) {
  gelu_backward_bias_impl(dy, u, du, rows, cols, db, accumulate, scratch, y, stream);
}

void gelu_backward_bias(const __nv_bfloat16* dy, const __nv_bfloat16* u, __nv_bfloat16* du, int rows,
                        int cols, float* db, bool accumulate, float* scratch, cudaStream_t stream,
                        __nv_bfloat16* y) {
  gelu_backward_bias_impl(dy, u, du, rows, cols, db, accumulate, scratch, y, stream);
}

}  // namespace vitddp
