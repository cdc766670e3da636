#include "cuda/kernels/ce_reduce.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>

#include "cuda/check/check_cuda.h"
#include "cuda/kernels/vec4.cuh"

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
// the unaligned head and the tail. `chunk` and `scratch` share their address modulo 16 (the sender
// places each copy at the chunk's offset within 16 bytes) and `stride` keeps it. The body's loads
// are evict-first (__ldcs: both operands are read once), so the sums push fewer of backward's GEMM
// operands out of L2; the result is stored normally, as the all-gather's copy reads it next (tf32
// +0.4-0.8 points of the 1-GPU figure in three of three repeats, bf16 unchanged:
// results/h200x2/copy-engine/cache-hints).
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
    const uint4 a = __ldcs(reinterpret_cast<const uint4*>(chunk + i));
    const T* ae = reinterpret_cast<const T*>(&a);
    float acc[V];
#pragma unroll
    for (int u = 0; u < V; ++u) acc[u] = load(ae + u);
    for (int k = 0; k < slots; ++k) {
      const uint4 b = __ldcs(reinterpret_cast<const uint4*>(scratch + k * stride + i));
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

// One element of ce_sum_chunk_16bit: the own value cast (divided) to T, the peers' copies added
// in fp32, one rounding to T, both forms stored. Returns whether the result is finite.
template <typename T>
__device__ __forceinline__ bool sum_one_16bit(float* x, T* out16, const T* scratch, size_t i, int slots, size_t stride,
                                              float divisor) {
  T own;
  store(&own, x[i] / divisor);
  float acc = load(&own);
  for (int k = 0; k < slots; ++k) acc += load(scratch + k * stride + i);
  T r;
  const bool ok = round_finite(acc, &r);
  out16[i] = r;
  x[i] = load(&r);
  return ok;
}

// Eight elements per step (two float4 of x, one 16-byte vector of each 16-bit buffer) when `vec`,
// then the tail element by element; element by element throughout otherwise.
template <typename T>
__global__ void sum_chunk_16bit_kernel(float* __restrict__ x, T* __restrict__ out16, const T* __restrict__ scratch,
                                       size_t n, int slots, size_t stride, float divisor, bool vec, int* nonfinite) {
  bool finite = true;
  constexpr int V = 8;
  const size_t nvec = vec ? n / V : 0;
  const size_t tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x, threads = (size_t)gridDim.x * blockDim.x;
  for (size_t v = tid; v < nvec; v += threads) {
    const size_t i = v * V;
    const float4 x0 = *reinterpret_cast<const float4*>(x + i), x1 = *reinterpret_cast<const float4*>(x + i + 4);
    const float xs[V] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
    float acc[V];
#pragma unroll
    for (int u = 0; u < V; ++u) {
      T own;
      store(&own, xs[u] / divisor);
      acc[u] = load(&own);
    }
    for (int k = 0; k < slots; ++k) {
      const uint4 b = *reinterpret_cast<const uint4*>(scratch + k * stride + i);
      const T* be = reinterpret_cast<const T*>(&b);
#pragma unroll
      for (int u = 0; u < V; ++u) acc[u] += load(be + u);
    }
    uint4 o;
    T* oe = reinterpret_cast<T*>(&o);
    float r[V];
#pragma unroll
    for (int u = 0; u < V; ++u) {
      finite &= round_finite(acc[u], oe + u);
      r[u] = load(oe + u);
    }
    *reinterpret_cast<uint4*>(out16 + i) = o;
    *reinterpret_cast<float4*>(x + i) = make_float4(r[0], r[1], r[2], r[3]);
    *reinterpret_cast<float4*>(x + i + 4) = make_float4(r[4], r[5], r[6], r[7]);
  }
  for (size_t i = nvec * V + tid; i < n; i += threads) finite &= sum_one_16bit(x, out16, scratch, i, slots, stride, divisor);
  if (!finite && nonfinite) *nonfinite = 1;
}

__global__ void or_flags_kernel(const int* flags_in, int n, int* flag) {
  int any = 0;
  for (int i = 0; i < n; ++i) any |= flags_in[i];
  if (any) *flag = 1;
}

__global__ void max_slots_kernel(const int* slots, int n, int* out) {
  int m = slots[0];
  for (int i = 1; i < n; ++i) m = max(m, slots[i]);
  *out = m;
}

// Blocks of 256 threads for n elements, about 4 vectors of `v` elements per thread: blocks finish
// in microseconds and interleave with the GEMMs'.
unsigned short_blocks(size_t n, size_t v) {
  const size_t per_block = 256 * v * 4;
  return (unsigned)std::max<size_t>(1, std::min<size_t>((n + per_block - 1) / per_block, 1 << 16));
}

template <typename T>
void launch(void* chunk, const void* scratch, size_t n, int slots, size_t stride, float scale, cudaStream_t s,
            int* nonfinite) {
  sum_chunk_kernel<T><<<short_blocks(n, 16 / sizeof(T)), 256, 0, s>>>(
      static_cast<T*>(chunk), static_cast<const T*>(scratch), n, slots, stride, scale, nonfinite);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace


void ce_sum_chunk(void* chunk, const void* scratch, size_t n, int slots, size_t slot_stride, float scale, DType t,
                  cudaStream_t stream, int* nonfinite) {
  if (n == 0) return;
  switch (t) {
    case DType::F32: return launch<float>(chunk, scratch, n, slots, slot_stride, scale, stream, nonfinite);
    case DType::F16: return launch<__half>(chunk, scratch, n, slots, slot_stride, scale, stream, nonfinite);
    case DType::BF16: return launch<__nv_bfloat16>(chunk, scratch, n, slots, slot_stride, scale, stream, nonfinite);
  }
}

void ce_sum_chunk_16bit(float* x, uint16_t* out16, const uint16_t* scratch, size_t n, int slots, size_t slot_stride,
                        float divisor, DType t, cudaStream_t stream, int* nonfinite) {
  if (t == DType::F32) throw std::invalid_argument("ce_sum_chunk_16bit: the payload type must be fp16 or bf16");
  if (n == 0) return;
  const bool vec = aligned16(x) && aligned16(out16) && aligned16(scratch) && slot_stride % 8 == 0;
  const unsigned blocks = short_blocks(n, 8);
  if (t == DType::F16)
    sum_chunk_16bit_kernel<__half><<<blocks, 256, 0, stream>>>(x, reinterpret_cast<__half*>(out16),
                                                               reinterpret_cast<const __half*>(scratch), n, slots,
                                                               slot_stride, divisor, vec, nonfinite);
  else
    sum_chunk_16bit_kernel<__nv_bfloat16><<<blocks, 256, 0, stream>>>(
        x, reinterpret_cast<__nv_bfloat16*>(out16), reinterpret_cast<const __nv_bfloat16*>(scratch), n, slots,
        slot_stride, divisor, vec, nonfinite);
  CUDA_CHECK(cudaGetLastError());
}

void ce_or_flags(const int* flags_in, int n, int* flag, cudaStream_t stream) {
  or_flags_kernel<<<1, 1, 0, stream>>>(flags_in, n, flag);
  CUDA_CHECK(cudaGetLastError());
}

void ce_max_slots(const int* slots, int n, int* out, cudaStream_t stream) {
  if (n < 1) throw std::invalid_argument("ce_max_slots: no slot");
  max_slots_kernel<<<1, 1, 0, stream>>>(slots, n, out);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace vitddp
