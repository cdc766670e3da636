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

constexpr int kRows = 64;     // query rows (and keys) per tile
constexpr int kThreads = 128; // 4 warps; warp w owns query rows 16w .. 16w + 15 of the block's tile

// Rows [0, 64) x DH columns at src (row stride ld floats) into tile dst[r][c] (row stride DH + 8:
// the rows of one fragment load start in distinct banks), rounded to tf32; rows >= valid zero.
template <int DH>
__device__ __forceinline__ void load_tile(float* dst, const float* src, size_t ld, int valid) {
  constexpr int kPerRow = DH / 4, kLd = DH + 8;
  for (int i = threadIdx.x; i < kRows * kPerRow; i += kThreads) {
    const int r = i / kPerRow, c = (i % kPerRow) * 4;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (r < valid) v = __ldg(reinterpret_cast<const float4*>(src + r * ld + c));
    *reinterpret_cast<float4*>(dst + r * kLd + c) =
        make_float4(__uint_as_float(tf32_rna(v.x)), __uint_as_float(tf32_rna(v.y)), __uint_as_float(tf32_rna(v.z)),
                    __uint_as_float(tf32_rna(v.w)));
  }
}

// The warp's 16 x 64 block of Q K^T (acc, zeroed by the caller): A = the Q tile's rows m0..,
// B^T = the K tile, both row-major. The k index is permuted within each k-step (t -> 2t,
// t + 4 -> 2t + 1) on A and B alike, which leaves the product unchanged and lets both come as
// 8-byte pairs.
template <int DH>
__device__ __forceinline__ void scores(float (&acc)[8][4], const float* Qs, const float* Ks, int m0, int g, int t) {
  constexpr int kLd = DH + 8;
#pragma unroll
  for (int k0 = 0; k0 < DH; k0 += 8) {
    const float* pa = Qs + (m0 + g) * kLd + k0 + 2 * t;
    const float2 r0 = *reinterpret_cast<const float2*>(pa), r1 = *reinterpret_cast<const float2*>(pa + 8 * kLd);
    const uint32_t a[4] = {__float_as_uint(r0.x), __float_as_uint(r1.x), __float_as_uint(r0.y),
                           __float_as_uint(r1.y)};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float2 v = *reinterpret_cast<const float2*>(Ks + (8 * j + g) * kLd + k0 + 2 * t);
      const uint32_t b[2] = {__float_as_uint(v.x), __float_as_uint(v.y)};
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

// Grid (query tiles, heads, batch). Pass 0 finds each row's max and sum of exponentials over the
// key tiles; pass 1 recomputes each tile's scores and writes the probabilities.
template <int DH>
__global__ void __launch_bounds__(kThreads) probs_tf32_kernel(const float* __restrict__ qkv, float* __restrict__ probs,
                                                              int T, int H, int ldp, float scale) {
  constexpr int kLd = DH + 8;
  __shared__ __align__(16) float Qs[kRows * kLd], Ks[kRows * kLd];
  const int r0 = blockIdx.x * kRows, h = blockIdx.y, b = blockIdx.z, D = H * DH;
  const size_t ld3 = 3 * (size_t)D;
  const float* base = qkv + (size_t)b * T * ld3 + h * DH;
  load_tile<DH>(Qs, base + (size_t)r0 * ld3, ld3, T - r0);
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, m0 = (threadIdx.x >> 5) * 16;
  float* P = probs + ((size_t)(b * H + h) * T) * ldp;
  float mx[2] = {-INFINITY, -INFINITY}, sum[2] = {0.0f, 0.0f}, inv[2] = {0.0f, 0.0f};
  const int tiles = (T + kRows - 1) / kRows;
  for (int pass = 0; pass < 2; ++pass) {
    for (int kt = 0; kt < tiles; ++kt) {
      __syncthreads();  // every warp is done with the previous K tile (the first: Q is loaded)
      load_tile<DH>(Ks, base + D + (size_t)kt * kRows * ld3, ld3, T - kt * kRows);
      __syncthreads();
      float s[8][4] = {};
      scores<DH>(s, Qs, Ks, m0, g, t);
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[j][e] = kt * kRows + 8 * j + 2 * t + (e & 1) < T ? s[j][e] * scale : -INFINITY;
      if (pass == 0) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          float m = -INFINITY;
#pragma unroll
          for (int j = 0; j < 8; ++j) m = fmaxf(m, fmaxf(s[j][2 * half], s[j][2 * half + 1]));
          const float m_new = fmaxf(mx[half], quad_max(m));  // finite: the tile has a column < T
          float add = 0.0f;
#pragma unroll
          for (int j = 0; j < 8; ++j) add += expf(s[j][2 * half] - m_new) + expf(s[j][2 * half + 1] - m_new);
          sum[half] = sum[half] * expf(mx[half] - m_new) + quad_sum(add);
          mx[half] = m_new;
        }
      } else {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int r = r0 + m0 + g + 8 * half;
          if (r >= T) continue;
          float* row = P + (size_t)r * ldp;
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            const int c = kt * kRows + 8 * j + 2 * t;
            const float p0 = expf(s[j][2 * half] - mx[half]) * inv[half];
            if (c + 1 < T) {
              *reinterpret_cast<float2*>(row + c) = make_float2(p0, expf(s[j][2 * half + 1] - mx[half]) * inv[half]);
            } else if (c < T) {
              row[c] = p0;
            }
          }
        }
      }
    }
    inv[0] = 1.0f / sum[0];
    inv[1] = 1.0f / sum[1];
  }
}

template <int DH>
void launch(const float* qkv, float* probs, int ldp, int batch, int T, int heads, cudaStream_t stream) {
  const dim3 grid((T + kRows - 1) / kRows, heads, batch);
  probs_tf32_kernel<DH><<<grid, kThreads, 0, stream>>>(qkv, probs, T, heads, ldp, 1.0f / std::sqrt((float)DH));
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
