#include "cuda/ce_reduce.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "cuda/check.h"

namespace vitddp {

namespace {

__device__ __forceinline__ float load(const float* p) { return *p; }
__device__ __forceinline__ float load(const __half* p) { return __half2float(*p); }
__device__ __forceinline__ float load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

template <typename T>
__global__ void sum_chunk_kernel(T* __restrict__ chunk, const T* __restrict__ scratch, size_t n, int slots,
                                 size_t stride, float scale) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float acc = load(chunk + i);
    for (int k = 0; k < slots; ++k) acc += load(scratch + k * stride + i);
    store(chunk + i, acc * scale);
  }
}

template <typename T>
void launch(void* chunk, const void* scratch, size_t n, int slots, size_t stride, float scale, cudaStream_t s) {
  constexpr int threads = 256;
  // About 16 elements per thread: blocks finish in microseconds and interleave with the GEMMs'.
  const size_t blocks = std::max<size_t>(1, std::min<size_t>((n + threads * 16 - 1) / (threads * 16), 1 << 16));
  sum_chunk_kernel<T><<<(unsigned)blocks, threads, 0, s>>>(static_cast<T*>(chunk), static_cast<const T*>(scratch), n,
                                                            slots, stride, scale);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace

size_t ce_dtype_bytes(CeDtype t) { return t == CeDtype::F32 ? 4 : 2; }

void ce_sum_chunk(void* chunk, const void* scratch, size_t n, int slots, size_t slot_stride, float scale, CeDtype t,
                  cudaStream_t stream) {
  if (n == 0) return;
  switch (t) {
    case CeDtype::F32: return launch<float>(chunk, scratch, n, slots, slot_stride, scale, stream);
    case CeDtype::F16: return launch<__half>(chunk, scratch, n, slots, slot_stride, scale, stream);
    case CeDtype::Bf16: return launch<__nv_bfloat16>(chunk, scratch, n, slots, slot_stride, scale, stream);
  }
}

}  // namespace vitddp
