// Four contiguous fp32 values moved as one 16-byte (fp32) or 8-byte (bf16) access, widened to fp32
// in registers (device code; the LayerNorm kernels, the fp32 -> bf16 cast and SGD's bf16 copy).
// Pointers must be aligned to 4 elements. grid_stride(): the loop of the elementwise kernels (cast,
// GELU, SGD) over vector groups and a scalar tail. aligned16(): the host-side test the vectorised
// kernels' launchers share.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace vitddp {

/// True when `p` is aligned to 16 bytes (one float4 / uint4 access). Host and device.
__host__ __device__ __forceinline__ bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

/// The grid-stride loop of the elementwise kernels over n elements: with `vec`, f_vec(i) for every
/// whole group i of V elements (elements V i .. V i + V - 1: one vector access), then f_one(e) for
/// the n % V elements after them; without `vec` (a pointer not aligned for the vector accesses),
/// f_one(e) for every element. Thread t of the grid takes groups (or elements) t, t + grid size, ...
template <int V, class FVec, class FOne>
__device__ __forceinline__ void grid_stride(size_t n, bool vec, FVec&& f_vec, FOne&& f_one) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t start = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (vec) {
    const size_t groups = n / V;
    for (size_t i = start; i < groups; i += stride) f_vec(i);
    start += groups * V;
  }
  for (size_t e = start; e < n; e += stride) f_one(e);
}

struct F4 {
  float v[4];
};

__device__ __forceinline__ F4 load4(const float* p) {
  const float4 a = *reinterpret_cast<const float4*>(p);
  return F4{{a.x, a.y, a.z, a.w}};
}
__device__ __forceinline__ F4 load4(const __nv_bfloat16* p) {
  const uint2 a = *reinterpret_cast<const uint2*>(p);
  const __nv_bfloat162 lo = *reinterpret_cast<const __nv_bfloat162*>(&a.x);
  const __nv_bfloat162 hi = *reinterpret_cast<const __nv_bfloat162*>(&a.y);
  return F4{{__low2float(lo), __high2float(lo), __low2float(hi), __high2float(hi)}};
}
__device__ __forceinline__ void store4(float* p, const F4& f) {
  *reinterpret_cast<float4*>(p) = make_float4(f.v[0], f.v[1], f.v[2], f.v[3]);
}
/// Rounds each value to bf16 (nearest even).
__device__ __forceinline__ void store4(__nv_bfloat16* p, const F4& f) {
  const __nv_bfloat162 lo = __floats2bfloat162_rn(f.v[0], f.v[1]), hi = __floats2bfloat162_rn(f.v[2], f.v[3]);
  uint2 a;
  a.x = *reinterpret_cast<const unsigned*>(&lo);
  a.y = *reinterpret_cast<const unsigned*>(&hi);
  *reinterpret_cast<uint2*>(p) = a;
}

}  // namespace vitddp
