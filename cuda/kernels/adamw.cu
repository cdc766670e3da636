#include <algorithm>

#include "cuda/kernels/adamw.h"
#include "cuda/check/check_cuda.h"

namespace vitddp {
namespace {

struct AdamWCoeffs {
  float decay, one_minus_b1, beta2, one_minus_b2, step_size, bc2_sqrt, eps, grad_scale;
};

// One grid-stride pass; the order of operations is adamw_step_host's (PyTorch's
// _single_tensor_adam): explicit multiplies and adds, no FMA contraction, so the result matches the
// host reference to the last bit or two.
__global__ void adamw_kernel(float* __restrict__ p, const float* __restrict__ grad, float* __restrict__ m,
                             float* __restrict__ v, size_t n, AdamWCoeffs c, const int* __restrict__ skip) {
  if (skip && *skip) return;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const float g = __fmul_rn(c.grad_scale, grad[i]);
    const float mi = __fadd_rn(m[i], __fmul_rn(c.one_minus_b1, __fsub_rn(g, m[i])));
    const float vi = __fadd_rn(__fmul_rn(v[i], c.beta2), __fmul_rn(__fmul_rn(c.one_minus_b2, g), g));
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), c.bc2_sqrt), c.eps);
    const float pi = __fmul_rn(p[i], c.decay);
    p[i] = __fsub_rn(pi, __fmul_rn(c.step_size, __fdiv_rn(mi, denom)));
    m[i] = mi;
    v[i] = vi;
  }
}

}  // namespace

void adamw_step_gpu(float* params, const float* grads, float* exp_avg, float* exp_avg_sq, size_t n,
                    const AdamWConfig& cfg, int64_t step, cudaStream_t stream, const int* d_skip) {
  const AdamWScalars s = adamw_scalars(cfg, step);  // validates before anything is enqueued
  if (n == 0) return;
  const AdamWCoeffs c{(float)s.decay,     (float)s.one_minus_b1, (float)s.beta2, (float)s.one_minus_b2,
                      (float)s.step_size, (float)s.bc2_sqrt,     (float)s.eps,   (float)s.grad_scale};
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<size_t>((n + threads - 1) / threads, 132 * 16));
  adamw_kernel<<<blocks, threads, 0, stream>>>(params, grads, exp_avg, exp_avg_sq, n, c, d_skip);
  CUDA_CHECK_LAUNCH();
}

}  // namespace vitddp
