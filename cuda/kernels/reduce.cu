#include "cuda/kernels/reduce.h"

#include <stdexcept>
#include <string>

#include "cuda/check/check_cuda.h"
#include "cuda/kernels/dtype.cuh"

namespace vitddp {
namespace {

constexpr int kChunkRows = 128;  // rows per stage-1 block
constexpr int kColsPerBlock = 32;
constexpr int kRowThreads = 8;

// Block (32, 8): 32 columns, 8 threads down the rows of one chunk; fixed-order combination.
template <typename TX>
__global__ void column_partial_kernel(const TX* __restrict__ x, int rows, int cols, int ld,
                                      float* __restrict__ partial) {
  __shared__ float s[kRowThreads][kColsPerBlock + 1];
  const int c = blockIdx.x * kColsPerBlock + threadIdx.x;
  const int r0 = blockIdx.y * kChunkRows;
  const int r1 = min(rows, r0 + kChunkRows);
  float acc = 0.0f;
  if (c < cols)
    for (int r = r0 + threadIdx.y; r < r1; r += kRowThreads) acc += to_f32(x[(size_t)r * ld + c]);
  s[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float t = 0.0f;
#pragma unroll
    for (int i = 0; i < kRowThreads; ++i) t += s[i][threadIdx.x];
    partial[(size_t)blockIdx.y * cols + c] = t;
  }
}

// Block (32, 8): 32 columns, 8 threads striding over the chunk partials, fixed-order combine.
__global__ void column_final_kernel(const float* __restrict__ partial, int nchunks, int cols,
                                    float* __restrict__ out, bool accumulate) {
  __shared__ float s[kRowThreads][kColsPerBlock + 1];
  const int c = blockIdx.x * kColsPerBlock + threadIdx.x;
  float t = 0.0f;
  if (c < cols)
    for (int k = threadIdx.y; k < nchunks; k += kRowThreads) t += partial[(size_t)k * cols + c];
  s[threadIdx.y][threadIdx.x] = t;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float u = 0.0f;
#pragma unroll
    for (int i = 0; i < kRowThreads; ++i) u += s[i][threadIdx.x];
    out[c] = accumulate ? out[c] + u : u;
  }
}

}  // namespace

size_t column_sum_scratch_floats(int rows, int cols) {
  const size_t nchunks = rows > 0 ? (size_t)(rows + kChunkRows - 1) / kChunkRows : 0;
  return nchunks * (size_t)(cols > 0 ? cols : 0);
}

namespace {
template <typename TX>
void column_sum_impl(const TX* x, int rows, int cols, int ld, float* out, bool accumulate,
                     float* scratch, cudaStream_t stream) {
  if (rows < 0 || cols < 0 || ld < cols)
    throw std::invalid_argument("column_sum: bad shape rows=" + std::to_string(rows) +
                                " cols=" + std::to_string(cols) + " ld=" + std::to_string(ld));
  if (cols == 0) return;
  const int nchunks = (rows + kChunkRows - 1) / kChunkRows;
  if (nchunks > 0) {
    dim3 grid((cols + kColsPerBlock - 1) / kColsPerBlock, nchunks);
    column_partial_kernel<TX><<<grid, dim3(kColsPerBlock, kRowThreads), 0, stream>>>(x, rows, cols, ld,
                                                                                scratch);
    CUDA_CHECK_LAUNCH();
  }
  column_sum_partials(scratch, nchunks, cols, out, accumulate, stream);
}

}  // namespace

void column_sum_partials(const float* partial, int nchunks, int cols, float* out, bool accumulate,
                         cudaStream_t stream) {
  if (cols <= 0) return;
  column_final_kernel<<<(cols + kColsPerBlock - 1) / kColsPerBlock, dim3(kColsPerBlock, kRowThreads), 0,
                        stream>>>(partial, nchunks, cols, out, accumulate);
  CUDA_CHECK_LAUNCH();
}

void column_sum(const float* x, int rows, int cols, int ld, float* out, bool accumulate,
                float* scratch, cudaStream_t stream) {
  column_sum_impl(x, rows, cols, ld, out, accumulate, scratch, stream);
}

void column_sum(const __nv_bfloat16* x, int rows, int cols, int ld, float* out, bool accumulate,
                float* scratch, cudaStream_t stream) {
  column_sum_impl(x, rows, cols, ld, out, accumulate, scratch, stream);
}

}  // namespace vitddp
