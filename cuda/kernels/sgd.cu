#include <algorithm>
#include <cstdint>
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

/// With vec4, four elements per thread (float4 loads/stores) and then the n % 4 tail; without
/// (a pointer not aligned for the vector accesses), one element per thread. The same per-element
/// arithmetic either way. Optionally also writes the bf16 working copy of the updated parameters
/// (8 bytes per 4 elements).
__global__ void sgd_kernel(float* __restrict__ p, const float* __restrict__ grad, float* __restrict__ buf,
                           __nv_bfloat16* __restrict__ p16, size_t n, SgdArgs a, const int* __restrict__ skip,
                           bool vec4) {
  if (skip && *skip) return;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t start = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (vec4) {
    const size_t n4 = n / 4;
    for (size_t i = start; i < n4; i += stride) {
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
    start += 4 * n4;
  }
  for (size_t i = start; i < n; i += stride) {
    float b = a.use_mom && !a.first_step ? buf[i] : 0.f;
    const float v = sgd_update(p[i], grad[i], &b, a);
    p[i] = v;
    if (a.use_mom) buf[i] = b;
    if (p16) p16[i] = __float2bfloat16_rn(v);
  }
}

/// With vec4, float4 loads and then the n % 4 tail; else one float per thread.
__global__ void nonfinite_kernel(const float* __restrict__ x, size_t n, bool vec4, int* flag) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t start = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  bool bad = false;
  if (vec4) {
    const size_t n4 = n / 4;
    for (size_t i = start; i < n4; i += stride) {
      const float4 v = reinterpret_cast<const float4*>(x)[i];
      bad |= !isfinite(v.x) || !isfinite(v.y) || !isfinite(v.z) || !isfinite(v.w);
    }
    start += 4 * n4;
  }
  for (size_t i = start; i < n; i += stride) bad |= !isfinite(x[i]);
  if (__syncthreads_or(bad) && threadIdx.x == 0) *flag = 1;
}

bool aligned(const void* ptr, size_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes == 0; }

/// Blocks of 256 threads for `work` items, at most `cap`, at least 1.
int blocks_for(size_t work, size_t cap) {
  return static_cast<int>(std::max<size_t>(1, std::min<size_t>((work + 255) / 256, cap)));
}

}  // namespace

void flag_nonfinite(const float* x, size_t n, int* d_flag, cudaStream_t stream) {
  if (n == 0) return;
  const bool vec4 = aligned(x, 16);  // whole flat buffers are (cudaMalloc: 256 bytes); a segment may not be
  nonfinite_kernel<<<blocks_for(vec4 ? n / 4 : n, 132 * 8), 256, 0, stream>>>(x, n, vec4, d_flag);
  CUDA_CHECK_LAUNCH();
}

void sgd_step_gpu(float* params, const float* grads, float* momentum_buf, size_t n,
                  const SgdConfig& cfg, bool first_step, cudaStream_t stream, const int* d_skip,
                  __nv_bfloat16* params_bf16) {
  if (n == 0) return;
  const SgdArgs a{(float)cfg.lr, (float)cfg.momentum, (float)cfg.weight_decay, (float)cfg.grad_scale,
                  cfg.weight_decay != 0, cfg.momentum != 0, first_step};
  // Whole cudaMalloc'd buffers are 256-byte aligned; a segment of them (ZeRO-1's chunk) may not be.
  const bool vec4 = aligned(params, 16) && aligned(grads, 16) && (!a.use_mom || aligned(momentum_buf, 16)) &&
                    (!params_bf16 || aligned(params_bf16, 8));
  sgd_kernel<<<blocks_for(vec4 ? n / 4 : n, 132 * 16), 256, 0, stream>>>(params, grads, momentum_buf, params_bf16, n,
                                                                          a, d_skip, vec4);
  CUDA_CHECK_LAUNCH();
}

}  // namespace vitddp
