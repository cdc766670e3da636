#include <algorithm>
#include "cuda/check/check_cuda.h"
#include "cuda/kernels/sgd.h"

namespace vitddp {
namespace {

struct SgdArgs {
  float lr, mom, wd, scale;
  bool use_wd, use_mom, first_step;
};

/// One element of torch.optim.SGD's update (model/sgd.h); returns the new parameter.
__device__ __forceinline__ float sgd_update(float pi, float gi, float* buf, const SgdArgs& a) {
  float g = a.scale * gi;
  if (a.use_wd) g = fmaf(a.wd, pi, g);
  if (a.use_mom) {
    const float b = a.first_step ? g : fmaf(a.mom, *buf, g);
    *buf = b;
    g = b;
  }
  return pi - a.lr * g;
}

/// Four elements per thread (float4 loads/stores), then the n % 4 tail; optionally also writes
/// the bf16 working copy of the updated parameters (8 bytes per 4 elements).
__global__ void sgd_kernel(float* __restrict__ p, const float* __restrict__ grad, float* __restrict__ buf,
                           __nv_bfloat16* __restrict__ p16, size_t n, SgdArgs a, const int* __restrict__ skip) {
  if (skip && *skip) return;
  const size_t n4 = n / 4;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += stride) {
    float4 pv = reinterpret_cast<float4*>(p)[i];
    const float4 gv = reinterpret_cast<const float4*>(grad)[i];
    float4 bv = make_float4(0.f, 0.f, 0.f, 0.f);
    if (a.use_mom && !a.first_step) bv = reinterpret_cast<float4*>(buf)[i];
    pv.x = sgd_update(pv.x, gv.x, &bv.x, a);
    pv.y = sgd_update(pv.y, gv.y, &bv.y, a);
    pv.z = sgd_update(pv.z, gv.z, &bv.z, a);
    pv.w = sgd_update(pv.w, gv.w, &bv.w, a);
    reinterpret_cast<float4*>(p)[i] = pv;
    if (a.use_mom) reinterpret_cast<float4*>(buf)[i] = bv;
    if (p16) {
      __nv_bfloat162 lo = __floats2bfloat162_rn(pv.x, pv.y), hi = __floats2bfloat162_rn(pv.z, pv.w);
      uint2 packed;
      packed.x = *reinterpret_cast<unsigned*>(&lo);
      packed.y = *reinterpret_cast<unsigned*>(&hi);
      reinterpret_cast<uint2*>(p16)[i] = packed;
    }
  }
  if (blockIdx.x == 0) {
    for (size_t i = 4 * n4 + threadIdx.x; i < n; i += blockDim.x) {
      float b = a.use_mom ? buf[i] : 0.f;
      const float v = sgd_update(p[i], grad[i], &b, a);
      p[i] = v;
      if (a.use_mom) buf[i] = b;
      if (p16) p16[i] = __float2bfloat16_rn(v);
    }
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
                  const SgdConfig& cfg, bool first_step, cudaStream_t stream, const int* d_skip,
                  __nv_bfloat16* params_bf16) {
  if (n == 0) return;
  // The flat buffers are cudaMalloc'd (256-byte aligned), so the float4 / uint2 views are aligned.
  const int threads = 256;
  const int blocks = static_cast<int>(std::max<size_t>(1, std::min<size_t>((n / 4 + threads - 1) / threads, 132 * 16)));
  const SgdArgs a{(float)cfg.lr, (float)cfg.momentum, (float)cfg.weight_decay, (float)cfg.grad_scale,
                  cfg.weight_decay != 0, cfg.momentum != 0, first_step};
  sgd_kernel<<<blocks, threads, 0, stream>>>(params, grads, momentum_buf, params_bf16, n, a, d_skip);
  CUDA_CHECK_LAUNCH();
}

}  // namespace vitddp
