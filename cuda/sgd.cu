#include <algorithm>
#include "cuda/check.h"
#include "cuda/sgd.h"

namespace vitddp {
namespace {

__global__ void sgd_kernel(float* __restrict__ p, const float* __restrict__ grad,
                           float* __restrict__ buf, size_t n, float lr, float mom, float wd, float scale,
                           bool use_wd, bool use_mom, bool first_step, const int* __restrict__ skip) {
  if (skip && *skip) return;
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

__global__ void nonfinite_kernel(const float4* __restrict__ x4, size_t n4, const float* __restrict__ tail,
                                 size_t ntail, int* flag) {
  bool bad = false;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += (size_t)gridDim.x * blockDim.x) {
    const float4 v = x4[i];
    bad |= !isfinite(v.x) || !isfinite(v.y) || !isfinite(v.z) || !isfinite(v.w);
  }
  if (blockIdx.x == 0)
    for (size_t i = threadIdx.x; i < ntail; i += blockDim.x) bad |= !isfinite(tail[i]);
  if (__syncthreads_or(bad) && threadIdx.x == 0) *flag = 1;
}

}  // namespace

void flag_nonfinite(const float* x, size_t n, int* d_flag, cudaStream_t stream) {
  if (n == 0) return;
  // The flat buffers are cudaMalloc'd (256-byte aligned), so the float4 view is aligned.
  const size_t n4 = n / 4;
  const int threads = 256;
  const int blocks = static_cast<int>(std::max<size_t>(1, std::min<size_t>((n4 + threads - 1) / threads, 132 * 8)));
  nonfinite_kernel<<<blocks, threads, 0, stream>>>(reinterpret_cast<const float4*>(x), n4, x + 4 * n4, n - 4 * n4,
                                                   d_flag);
  CUDA_CHECK_LAUNCH();
}

void sgd_step_gpu(float* params, const float* grads, float* momentum_buf, size_t n,
                  const SgdConfig& cfg, bool first_step, cudaStream_t stream, const int* d_skip) {
  if (n == 0) return;
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<size_t>((n + threads - 1) / threads, 132 * 16));
  sgd_kernel<<<blocks, threads, 0, stream>>>(params, grads, momentum_buf, n, (float)cfg.lr,
                                             (float)cfg.momentum, (float)cfg.weight_decay, (float)cfg.grad_scale,
                                             cfg.weight_decay != 0, cfg.momentum != 0, first_step, d_skip);
  CUDA_CHECK_LAUNCH();
}

}  // namespace vitddp
