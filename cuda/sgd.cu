#include "cuda/check.h"
#include "cuda/sgd.h"

namespace vitddp {
namespace {

__global__ void sgd_kernel(float* __restrict__ p, const float* __restrict__ grad,
                           float* __restrict__ buf, size_t n, float lr, float mom, float wd, float scale,
                           bool use_wd, bool use_mom, bool first_step) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float g = scale * grad[i];
    const float pi = p[i];
    if (use_wd) g = fmaf(wd, pi, g);
    if (use_mom) {
      const float b = first_step ? g : fmaf(mom, buf[i], g);
      buf[i] = b;
      g = b;
    }
    p[i] = pi - lr * g;
  }
}

}  // namespace

void sgd_step_gpu(float* params, const float* grads, float* momentum_buf, size_t n,
                  const SgdConfig& cfg, bool first_step, cudaStream_t stream) {
  if (n == 0) return;
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<size_t>((n + threads - 1) / threads, 132 * 16));
  sgd_kernel<<<blocks, threads, 0, stream>>>(params, grads, momentum_buf, n, (float)cfg.lr,
                                             (float)cfg.momentum, (float)cfg.weight_decay, (float)cfg.grad_scale,
                                             cfg.weight_decay != 0, cfg.momentum != 0, first_step);
  CUDA_CHECK_LAUNCH();
}

}  // namespace vitddp
