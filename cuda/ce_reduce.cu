#include "cuda/ce_reduce.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "cuda/check.h"

namespace vitddp {

namespace {

__device__ __forceinline__ float load(const float* p) { return *p; }
__device__ __forceinline__ float load(const __half* p) { return __half2float(*p); }
__device__ __forceinline__ float load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

// The sum rounded to T, and whether it is finite (checked after rounding: fp16 can overflow).
template <typename T>
__device__ __forceinline__ bool round_finite(float v, T* out) {
  store(out, v);
  return isfinite(load(out));
}

template <typename T>
__device__ __forceinline__ bool sum_one(T* chunk, const T* scratch, size_t i, int slots, size_t stride, float scale) {
  float acc = load(chunk + i);
  for (int k = 0; k < slots; ++k) acc += load(scratch + k * stride + i);
  T r;
  const bool ok = round_finite(acc * scale, &r);
  chunk[i] = r;
  return ok;
}

// 16-byte loads and stores (float4 of fp32, 8 x 16-bit) for the aligned body, scalar elements for
// the unaligned head and the tail. `chunk` and `scratch` share their address modulo 16 (the
// sender places each copy at the chunk's offset within 16 bytes) and `stride` keeps it.
template <typename T>
__global__ void sum_chunk_kernel(T* __restrict__ chunk, const T* __restrict__ scratch, size_t n, int slots,
                                 size_t stride, float scale, int* nonfinite) {
  bool finite = true;
  constexpr int V = 16 / sizeof(T);
  const size_t head = std::min<size_t>(n, ((16 - (reinterpret_cast<uintptr_t>(chunk) & 15)) & 15) / sizeof(T));
  const size_t nvec = (n - head) / V, tail = head + nvec * V;
  const size_t tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x, threads = (size_t)gridDim.x * blockDim.x;
  if (tid < head) finite &= sum_one(chunk, scratch, tid, slots, stride, scale);
  if (tid < n - tail) finite &= sum_one(chunk, scratch, tail + tid, slots, stride, scale);
  for (size_t v = tid; v < nvec; v += threads) {
    const size_t i = head + v * V;
    const uint4 a = *reinterpret_cast<const uint4*>(chunk + i);
    const T* ae = reinterpret_cast<const T*>(&a);
    float acc[V];
#pragma unroll
    for (int u = 0; u < V; ++u) acc[u] = load(ae + u);
    for (int k = 0; k < slots; ++k) {
      const uint4 b = *reinterpret_cast<const uint4*>(scratch + k * stride + i);
      const T* be = reinterpret_cast<const T*>(&b);
#pragma unroll
      for (int u = 0; u < V; ++u) acc[u] += load(be + u);
    }
    uint4 o;
    T* oe = reinterpret_cast<T*>(&o);
#pragma unroll
    for (int u = 0; u < V; ++u) finite &= round_finite(acc[u] * scale, oe + u);
    *reinterpret_cast<uint4*>(chunk + i) = o;
  }
  if (!finite && nonfinite) *nonfinite = 1;
}

__global__ void or_flags_kernel(const int* flags_in, int n, int* flag) {
  int any = 0;
  for (int i = 0; i < n; ++i) any |= flags_in[i];
  if (any) *flag = 1;
}

template <typename T>
void launch(void* chunk, const void* scratch, size_t n, int slots, size_t stride, float scale, cudaStream_t s,
            int* nonfinite) {
  constexpr int threads = 256;
  constexpr size_t V = 16 / sizeof(T);
  // About 4 vectors per thread: blocks finish in microseconds and interleave with the GEMMs'.
  const size_t per_block = threads * V * 4;
  const size_t blocks = std::max<size_t>(1, std::min<size_t>((n + per_block - 1) / per_block, 1 << 16));
  sum_chunk_kernel<T><<<(unsigned)blocks, threads, 0, s>>>(static_cast<T*>(chunk), static_cast<const T*>(scratch), n,
                                                            slots, stride, scale, nonfinite);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace

size_t ce_dtype_bytes(CeDtype t) { return t == CeDtype::F32 ? 4 : 2; }

void ce_sum_chunk(void* chunk, const void* scratch, size_t n, int slots, size_t slot_stride, float scale, CeDtype t,
                  cudaStream_t stream, int* nonfinite) {
  if (n == 0) return;
  switch (t) {
    case CeDtype::F32: return launch<float>(chunk, scratch, n, slots, slot_stride, scale, stream, nonfinite);
    case CeDtype::F16: return launch<__half>(chunk, scratch, n, slots, slot_stride, scale, stream, nonfinite);
    case CeDtype::Bf16: return launch<__nv_bfloat16>(chunk, scratch, n, slots, slot_stride, scale, stream, nonfinite);
  }
}

void ce_or_flags(const int* flags_in, int n, int* flag, cudaStream_t stream) {
  or_flags_kernel<<<1, 1, 0, stream>>>(flags_in, n, flag);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace vitddp
