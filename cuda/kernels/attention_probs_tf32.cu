#include "cuda/kernels/attention_probs_tf32.h"

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "cuda/check/check_cuda.h"
#include "cuda/kernels/mma_tf32.cuh"
#include "cuda/kernels/vec4.cuh"

namespace vitddp {
namespace {

constexpr int kKeys = 64;     // keys per K tile
constexpr int kWarps = 8;     // warp w owns query rows 16w .. 16w + 15 of the block's 128
constexpr int kRows = 16 * kWarps;
constexpr int kThreads = 32 * kWarps;

// Shared-memory row stride (floats) of the Q and K tiles: DH + 8, so the rows of one fragment
// load start in distinct banks.
template <int DH>
__host__ __device__ constexpr int tile_ld() { return DH + 8; }
template <int DH>
constexpr size_t smem_bytes() { return sizeof(float) * (size_t)tile_ld<DH>() * (kRows + 2 * kKeys); }

// 16 bytes global -> shared without registers (cp.async, L2 only); src_bytes 0 fills zeros.
__device__ __forceinline__ void cp_async16(float* dst, const float* src, int src_bytes) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Starts copying keys [k0, k0 + 64) (rows >= T as zeros) of one (image, head) into tile dst.
template <int DH>
__device__ __forceinline__ void load_k_async(float* dst, const float* kbase, size_t ld, int k0, int T) {
  constexpr int kPerRow = DH / 4;
  for (int i = threadIdx.x; i < kKeys * kPerRow; i += kThreads) {
    const int r = i / kPerRow, c = (i % kPerRow) * 4;
    const bool valid = k0 + r < T;
    cp_async16(dst + r * tile_ld<DH>() + c, valid ? kbase + (size_t)(k0 + r) * ld + c : kbase, valid ? 16 : 0);
  }
}

// The block's query rows [r0, r0 + 128) (rows >= T as zeros) into tile Qs, rounded to tf32.
template <int DH>
__device__ __forceinline__ void load_q(float* Qs, const float* qbase, size_t ld, int r0, int T) {
  constexpr int kPerRow = DH / 4;
  for (int i = threadIdx.x; i < kRows * kPerRow; i += kThreads) {
    const int r = i / kPerRow, c = (i % kPerRow) * 4;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (r0 + r < T) v = __ldg(reinterpret_cast<const float4*>(qbase + (size_t)(r0 + r) * ld + c));
    *reinterpret_cast<float4*>(Qs + r * tile_ld<DH>() + c) =
        make_float4(__uint_as_float(tf32_rna(v.x)), __uint_as_float(tf32_rna(v.y)), __uint_as_float(tf32_rna(v.z)),
                    __uint_as_float(tf32_rna(v.w)));
  }
}

// The warp's 16 x 64 block of Q K^T (acc, zeroed by the caller): A = rows m0.. of the Q tile
// (already tf32), B^T = the K tile (fp32, rounded here). The k index is permuted within each
// k-step (t -> 2t, t + 4 -> 2t + 1) on A and B alike, which leaves the product unchanged and lets
// both come as 8-byte pairs.
template <int DH>
__device__ __forceinline__ void scores(float (&acc)[8][4], const float* Qs, const float* Ks, int m0, int g, int t) {
  constexpr int kLd = tile_ld<DH>();
#pragma unroll
  for (int k0 = 0; k0 < DH; k0 += 8) {
    const float* pa = Qs + (m0 + g) * kLd + k0 + 2 * t;
    const float2 r0 = *reinterpret_cast<const float2*>(pa), r1 = *reinterpret_cast<const float2*>(pa + 8 * kLd);
    const uint32_t a[4] = {__float_as_uint(r0.x), __float_as_uint(r1.x), __float_as_uint(r0.y),
                           __float_as_uint(r1.y)};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float2 v = *reinterpret_cast<const float2*>(Ks + (8 * j + g) * kLd + k0 + 2 * t);
      const uint32_t b[2] = {tf32_rna(v.x), tf32_rna(v.y)};
      mma_tf32_m16n8k8(acc[j], a, b);
    }
  }
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Grid (query blocks of 128 rows, heads, batch). Iterations 0 .. tiles - 1 (pass 0) find each
// row's max and sum of exponentials over the key tiles; iterations tiles .. 2 tiles - 1 (pass 1)
// recompute each tile's scores and write the probabilities. K tiles are double-buffered: the next
// one is copied while the current one is multiplied.
template <int DH>
__global__ void __launch_bounds__(kThreads, 2) probs_tf32_kernel(const float* __restrict__ qkv,
                                                                 float* __restrict__ probs, int T, int H, int ldp,
                                                                 float scale) {
  constexpr int kLd = tile_ld<DH>();
  extern __shared__ __align__(16) float smem[];
  float* Qs = smem;
  auto kbuf = [&](int i) { return smem + (kRows + (i & 1) * kKeys) * kLd; };  // the two K buffers
  const int r0 = blockIdx.x * kRows, h = blockIdx.y, b = blockIdx.z, D = H * DH;
  const size_t ld3 = 3 * (size_t)D;
  const float* qbase = qkv + (size_t)b * T * ld3 + h * DH;
  const int tiles = (T + kKeys - 1) / kKeys, iters = 2 * tiles;
  load_k_async<DH>(kbuf(0), qbase + D, ld3, 0, T);
  cp_async_commit();
  load_q<DH>(Qs, qbase, ld3, r0, T);
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, m0 = (threadIdx.x >> 5) * 16;
  float* P = probs + ((size_t)(b * H + h) * T) * ldp;
  float mx[2] = {-INFINITY, -INFINITY}, sum[2] = {0.0f, 0.0f}, inv[2] = {0.0f, 0.0f};
  for (int it = 0; it < iters; ++it) {
    const int kt = it % tiles;
    if (it + 1 < iters) {
      load_k_async<DH>(kbuf(it + 1), qbase + D, ld3, ((it + 1) % tiles) * kKeys, T);
      cp_async_commit();
      cp_async_wait<1>();  // tile `it` has landed (this thread's copies)
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // ... and every thread's, and the Q tile
    float s[8][4] = {};
    scores<DH>(s, Qs, kbuf(it), m0, g, t);
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] = kt * kKeys + 8 * j + 2 * t + (e & 1) < T ? s[j][e] * scale : -INFINITY;
    if (it < tiles) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float m = -INFINITY;
#pragma unroll
        for (int j = 0; j < 8; ++j) m = fmaxf(m, fmaxf(s[j][2 * half], s[j][2 * half + 1]));
        const float m_new = fmaxf(mx[half], quad_max(m));  // finite: the tile has a key < T
        float add = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; ++j) add += expf(s[j][2 * half] - m_new) + expf(s[j][2 * half + 1] - m_new);
        sum[half] = sum[half] * expf(mx[half] - m_new) + quad_sum(add);
        mx[half] = m_new;
      }
      if (it == tiles - 1) {
        inv[0] = 1.0f / sum[0];
        inv[1] = 1.0f / sum[1];
      }
    } else {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = r0 + m0 + g + 8 * half;
        if (r >= T) continue;
        float* row = P + (size_t)r * ldp;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const int c = kt * kKeys + 8 * j + 2 * t;
          const float p0 = expf(s[j][2 * half] - mx[half]) * inv[half];
          if (c + 1 < T) {
            *reinterpret_cast<float2*>(row + c) = make_float2(p0, expf(s[j][2 * half + 1] - mx[half]) * inv[half]);
          } else if (c < T) {
            row[c] = p0;
          }
        }
      }
    }
    __syncthreads();  // every warp is done with this K buffer before the next iteration refills it
  }
}

template <int DH>
void launch(const float* qkv, float* probs, int ldp, int batch, int T, int heads, cudaStream_t stream) {
  constexpr size_t smem = smem_bytes<DH>();
  CUDA_CHECK(cudaFuncSetAttribute(probs_tf32_kernel<DH>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  const dim3 grid((T + kRows - 1) / kRows, heads, batch);
  probs_tf32_kernel<DH><<<grid, kThreads, smem, stream>>>(qkv, probs, T, heads, ldp, 1.0f / std::sqrt((float)DH));
  CUDA_CHECK_LAUNCH();
}

}  // namespace

bool attention_probs_tf32_fits(int head_dim, const void* qkv, const void* probs, int ldp) {
  return (head_dim == 64 || head_dim == 80) && aligned16(qkv) && reinterpret_cast<uintptr_t>(probs) % 8 == 0 &&
         ldp % 2 == 0;
}

void attention_probs_tf32(const float* qkv, float* probs, int ldp, int batch, int T, int heads, int head_dim,
                          cudaStream_t stream) {
  if (!attention_probs_tf32_fits(head_dim, qkv, probs, ldp) || T < 1 || T > 512 || ldp < T || batch < 1 ||
      heads < 1 || batch > 65535 || heads > 65535)
    throw std::invalid_argument("attention_probs_tf32: unsupported call B=" + std::to_string(batch) + " T=" +
                                std::to_string(T) + " H=" + std::to_string(heads) + " dh=" + std::to_string(head_dim) +
                                " ldp=" + std::to_string(ldp) +
                                " (need head_dim 64 or 80, 1 <= T <= 512, ldp >= T and even, qkv 16-byte and "
                                "probs 8-byte aligned)");
  if (head_dim == 64) launch<64>(qkv, probs, ldp, batch, T, heads, stream);
  else launch<80>(qkv, probs, ldp, batch, T, heads, stream);
}

}  // namespace vitddp
