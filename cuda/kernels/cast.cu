#include "cuda/kernels/cast.h"

#include <algorithm>
#include <cstdint>

#include "cuda/check/check_cuda.h"

namespace vitddp {
namespace {

__global__ void to_bf16_kernel(const float* __restrict__ x, __nv_bfloat16* __restrict__ y, size_t n,
                               bool vec4) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t start = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (vec4) {
    const size_t n4 = n / 4;
    for (size_t i = start; i < n4; i += stride) {
      const float4 v = reinterpret_cast<const float4*>(x)[i];
      __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
      uint2 packed;
      packed.x = *reinterpret_cast<uint32_t*>(&lo);
      packed.y = *reinterpret_cast<uint32_t*>(&hi);
      reinterpret_cast<uint2*>(y)[i] = packed;
    }
    start += n4 * 4;
  }
  for (size_t i = start; i < n; i += stride) y[i] = __float2bfloat16_rn(x[i]);
}

}  // namespace

void convert_to_bf16(const float* x, __nv_bfloat16* y, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  const bool vec4 = (reinterpret_cast<uintptr_t>(x) % 16) == 0 && (reinterpret_cast<uintptr_t>(y) % 8) == 0;
  const size_t work = vec4 ? n / 4 + 1 : n;
  const int threads = 256;
  const int blocks = (int)std::max<size_t>(1, std::min<size_t>((work + threads - 1) / threads, 132 * 16));
  to_bf16_kernel<<<blocks, threads, 0, stream>>>(x, y, n, vec4);
  CUDA_CHECK_LAUNCH();
}

}  // namespace vitddp
