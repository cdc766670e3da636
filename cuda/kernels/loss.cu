#include "cuda/kernels/loss.h"

#include <stdexcept>
#include <string>

#include "cuda/kernels/block_reduce.cuh"
#include "cuda/check/check_cuda.h"

namespace vitddp {
namespace {

constexpr int kThreads = 256;

// One block per row: max, sum of exp, loss and gradient of that row.
__global__ void xent_row_kernel(const float* __restrict__ logits, const int32_t* __restrict__ labels,
                                int batch, int classes, float* __restrict__ dlogits,
                                float* __restrict__ row_loss) {
  __shared__ float scratch[32];
  __shared__ float smax[32];
  const int b = blockIdx.x;
  const float* z = logits + (size_t)b * classes;
  float m = -INFINITY;
  for (int k = threadIdx.x; k < classes; k += blockDim.x) m = fmaxf(m, z[k]);
  m = warp_max(m);
  if ((threadIdx.x & 31) == 0) smax[threadIdx.x >> 5] = m;
  __syncthreads();
  m = -INFINITY;
  for (int w = 0; w < (int)(blockDim.x >> 5); ++w) m = fmaxf(m, smax[w]);
  float s = 0.0f;
  for (int k = threadIdx.x; k < classes; k += blockDim.x) s += expf(z[k] - m);
  s = block_sum(s, scratch);
  const int label = labels[b];
  const bool valid = label >= 0 && label < classes;
  const float inv_s = 1.0f / s, inv_b = 1.0f / batch;
  float* g = dlogits + (size_t)b * classes;
  for (int k = threadIdx.x; k < classes; k += blockDim.x) {
    const float p = expf(z[k] - m) * inv_s;
    g[k] = valid ? (p - (k == label ? 1.0f : 0.0f)) * inv_b : NAN;
  }
  if (threadIdx.x == 0) row_loss[b] = valid ? (logf(s) + m - z[label]) : NAN;
}

__global__ void xent_mean_kernel(const float* __restrict__ row_loss, int batch, float* d_loss) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  float t = 0.0f;
  for (int b = 0; b < batch; ++b) t += row_loss[b];
  *d_loss = t / batch;
}

}  // namespace

void softmax_xent(const float* logits, const int32_t* labels, int batch, int classes,
                  float* d_loss, float* dlogits, float* scratch, cudaStream_t stream) {
  if (batch < 1 || classes < 1)
    throw std::invalid_argument("softmax_xent: bad shape batch=" + std::to_string(batch) +
                                " classes=" + std::to_string(classes));
  xent_row_kernel<<<batch, kThreads, 0, stream>>>(logits, labels, batch, classes, dlogits, scratch);
  CUDA_CHECK_LAUNCH();
  xent_mean_kernel<<<1, 32, 0, stream>>>(scratch, batch, d_loss);
  CUDA_CHECK_LAUNCH();
}

}  // namespace vitddp
