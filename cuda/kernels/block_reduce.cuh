// Deterministic warp / block sums for the custom kernels (device code only).
#pragma once
#include <cuda_runtime.h>

namespace vitddp {

/// Sum over the 32 lanes of a warp (butterfly: every lane gets the same, order-fixed result).
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/// Max over the 32 lanes of a warp.
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// Sum of `v` over the whole block, returned to every thread. blockDim.x must be a multiple of
/// 32 (at most 1024) and every thread must call it. `scratch` is 32 floats of shared memory; the
/// function synchronises before returning so the scratch can be reused at once.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float t = lane < nwarps ? scratch[lane] : 0.0f;
  t = warp_sum(t);
  __syncthreads();
  return t;
}

/// Two block sums at once (one pass of synchronisation). `scratch` is 64 floats of shared memory.
__device__ __forceinline__ float2 block_sum2(float a, float b, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  a = warp_sum(a);
  b = warp_sum(b);
  if (lane == 0) {
    scratch[warp] = a;
    scratch[32 + warp] = b;
  }
  __syncthreads();
  float ta = lane < nwarps ? scratch[lane] : 0.0f;
  float tb = lane < nwarps ? scratch[32 + lane] : 0.0f;
  ta = warp_sum(ta);
  tb = warp_sum(tb);
  __syncthreads();
  return make_float2(ta, tb);
}

}  // namespace vitddp
