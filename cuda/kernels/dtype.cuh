// Element-type helpers for kernels templated on their storage type (float or __nv_bfloat16):
// loads widen to fp32, stores round to nearest even. Device code only.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace vitddp {

/// The value of v as fp32 (exact for both types).
__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

/// v rounded to T (identity for float, round-to-nearest-even for bf16).
template <typename T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

}  // namespace vitddp
