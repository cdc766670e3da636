#include "cuda/kernels/cast.h"

#include <algorithm>
#include <cstdint>

#include "cuda/check/check_cuda.h"
#include "cuda/kernels/vec4.cuh"

namespace vitddp {
namespace {

__global__ void to_bf16_kernel(const float* __restrict__ x, __nv_bfloat16* __restrict__ y, size_t n,
                               bool vec4) {
  grid_stride<4>(
      n, vec4, [=](size_t i) { store4(y + 4 * i, load4(x + 4 * i)); },
      [=](size_t e) { y[e] = __float2bfloat16_rn(x[e]); });
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
