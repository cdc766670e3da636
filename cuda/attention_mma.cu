#include "cuda/attention_mma.h"

#include <cstdint>

#include "cuda/check.h"
#include "cuda/vec4.cuh"

namespace vitddp {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kT = 64;            // rows and columns of every tile (the sequence padded to 64)
constexpr int kDh = 64;           // head dimension
constexpr int kLd = 72;           // shared-memory row stride in bf16: 36 words, so the 8 rows of a
                                  // fragment load start in 8 different bank quadruples
constexpr int kTile = kT * kLd;   // bf16 elements of one tile
constexpr int kThreads = 128;     // 4 warps; warp w owns rows 16w .. 16w + 15 of each product
constexpr float kScale = 0.125f;  // 1 / sqrt(kDh)
constexpr size_t kBwdSmem = 6 * kTile * sizeof(bf16);  // 55,296 bytes: 4 blocks per H200 SM

// Fragments of mma.sync.m16n8k16 (PTX ISA, "Matrix Fragments for mma.m16n8k16"): lane = 4 g + t.
//  A (16 x 16, row-major): a0 = (g, 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8, 2t+8..);
//  B (16 x 8, k x n):      b0 = (k 2t..2t+1, n g), b1 = (k 2t+8.., n g);
//  C (16 x 8, fp32):       c0, c1 = (g, 2t), (g, 2t+1); c2, c3 = (g+8, 2t), (g+8, 2t+1).
// Each register holds two bf16, the lower column (or k) in the low half.
using FragA = uint32_t[4];
using FragB = uint32_t[2];
using Acc = float[8][4];  // a warp's 16 x 64 fp32 result: 8 C fragments, columns 8j .. 8j + 7

__device__ __forceinline__ void mma(float (&c)[4], const FragA& a, const FragB& b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ uint32_t ld32(const bf16* p) { return *reinterpret_cast<const uint32_t*>(p); }
__device__ __forceinline__ uint32_t pair(bf16 lo, bf16 hi) {
  return static_cast<uint32_t>(__bfloat16_as_ushort(lo)) | (static_cast<uint32_t>(__bfloat16_as_ushort(hi)) << 16);
}
__device__ __forceinline__ uint32_t pack(float lo, float hi) { return pair(__float2bfloat16_rn(lo), __float2bfloat16_rn(hi)); }

// A = M[m0.., k0..] of a row-major tile M[m][k].
__device__ __forceinline__ void load_a(FragA& a, const bf16* M, int m0, int k0, int g, int t) {
  const bf16* p = M + (m0 + g) * kLd + k0 + 2 * t;
  a[0] = ld32(p);
  a[1] = ld32(p + 8 * kLd);
  a[2] = ld32(p + 8);
  a[3] = ld32(p + 8 * kLd + 8);
}
// A = M[m0.., k0..] where the tile holds its transpose, Mt[k][m].
__device__ __forceinline__ void load_a_t(FragA& a, const bf16* Mt, int m0, int k0, int g, int t) {
  const bf16* p = Mt + (k0 + 2 * t) * kLd + m0 + g;
  a[0] = pair(p[0], p[kLd]);
  a[1] = pair(p[8], p[kLd + 8]);
  a[2] = pair(p[8 * kLd], p[9 * kLd]);
  a[3] = pair(p[8 * kLd + 8], p[9 * kLd + 8]);
}
// B[k][n] for k0.., n0.. from a tile holding Bt[n][k] (row-major in k).
__device__ __forceinline__ void load_b(FragB& b, const bf16* Bt, int n0, int k0, int g, int t) {
  const bf16* p = Bt + (n0 + g) * kLd + k0 + 2 * t;
  b[0] = ld32(p);
  b[1] = ld32(p + 8);
}

// A fragments for k-step kk from a warp's fp32 result x (its C fragments 2kk and 2kk + 1 cover the
// same 16 x 16 block), split as x = hi + lo with both bf16: hi + lo keeps 16 bits of x.
__device__ __forceinline__ void split_a(FragA& hi, FragA& lo, const Acc& x, int kk) {
  const float v[8] = {x[2 * kk][0],     x[2 * kk][1],     x[2 * kk][2],     x[2 * kk][3],
                      x[2 * kk + 1][0], x[2 * kk + 1][1], x[2 * kk + 1][2], x[2 * kk + 1][3]};
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const bf16 h0 = __float2bfloat16_rn(v[2 * r]), h1 = __float2bfloat16_rn(v[2 * r + 1]);
    hi[r] = pair(h0, h1);
    lo[r] = pack(v[2 * r] - __bfloat162float(h0), v[2 * r + 1] - __bfloat162float(h1));
  }
}

// acc += (the warp's rows of A) x B, K = 64: A from a row-major (or transposed) tile.
template <bool kTransposedA>
__device__ __forceinline__ void gemm_tile(Acc& acc, const bf16* A, int m0, const bf16* Bt, int g, int t) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    FragA a;
    if (kTransposedA) load_a_t(a, A, m0, 16 * kk, g, t);
    else load_a(a, A, m0, 16 * kk, g, t);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      FragB b;
      load_b(b, Bt, 8 * j, 16 * kk, g, t);
      mma(acc[j], a, b);
    }
  }
}
// acc += (Ah + Al) x B with Ah, Al row-major tiles (the hi and lo halves of an fp32 matrix).
__device__ __forceinline__ void gemm_split_tile(Acc& acc, const bf16* Ah, const bf16* Al, int m0, const bf16* Bt,
                                                int g, int t) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    FragA ah, al;
    load_a(ah, Ah, m0, 16 * kk, g, t);
    load_a(al, Al, m0, 16 * kk, g, t);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      FragB b;
      load_b(b, Bt, 8 * j, 16 * kk, g, t);
      mma(acc[j], ah, b);
      mma(acc[j], al, b);
    }
  }
}
// acc += x B with x the warp's own fp32 16 x 64 result (split into hi + lo).
__device__ __forceinline__ void gemm_regs(Acc& acc, const Acc& x, const bf16* Bt, int g, int t) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    FragA hi, lo;
    split_a(hi, lo, x, kk);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      FragB b;
      load_b(b, Bt, 8 * j, 16 * kk, g, t);
      mma(acc[j], hi, b);
      mma(acc[j], lo, b);
    }
  }
}

// Row r (< 64) and column c of element e (0..3) of C fragment j of the warp whose rows start at m0.
__device__ __forceinline__ int frag_row(int m0, int g, int e) { return m0 + g + 8 * (e >> 1); }
__device__ __forceinline__ int frag_col(int j, int t, int e) { return 8 * j + 2 * t + (e & 1); }

// Rows [0, 64) x 64 columns of bf16 at src (row stride ld) into the tile dst[r][c]; rows >= T zero.
__device__ __forceinline__ void load_rows(bf16* dst, const bf16* src, size_t ld, int T) {
  for (int i = threadIdx.x; i < kT * 8; i += kThreads) {
    const int r = i >> 3, c = (i & 7) * 8;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < T) v = __ldg(reinterpret_cast<const uint4*>(src + r * ld + c));
    *reinterpret_cast<uint4*>(dst + r * kLd + c) = v;
  }
}
// The same rows into the transposed tile dst[c][r] (a warp takes 32 consecutive rows of one
// 8-column group, so its 16-bit stores fill consecutive words).
__device__ __forceinline__ void load_rows_t(bf16* dst, const bf16* src, size_t ld, int T) {
  for (int i = threadIdx.x; i < kT * 8; i += kThreads) {
    const int r = i & (kT - 1), c = (i / kT) * 8;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < T) v = __ldg(reinterpret_cast<const uint4*>(src + r * ld + c));
    const bf16* e = reinterpret_cast<const bf16*>(&v);
#pragma unroll
    for (int k = 0; k < 8; ++k) dst[(c + k) * kLd + r] = e[k];
  }
}

// The warp's rows (< T) of x as bf16 into dst[r * ld + c] (c < 64).
__device__ __forceinline__ void store_rows(bf16* dst, size_t ld, const Acc& x, int m0, int g, int t, int T) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = m0 + g + 8 * half;
    if (r >= T) continue;
#pragma unroll
    for (int j = 0; j < 8; ++j)
      *reinterpret_cast<uint32_t*>(dst + r * ld + 8 * j + 2 * t) = pack(x[j][2 * half], x[j][2 * half + 1]);
  }
}

// Sum (or max) of v over the 4 lanes that share a fragment row (lanes 4g .. 4g + 3).
__device__ __forceinline__ float row_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
__device__ __forceinline__ float row_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

// One block per (head, batch): S = Q K^T / 8, P = softmax(S) (written to probs), O = P V.
__global__ void __launch_bounds__(kThreads) attn_fwd_mma_kernel(const bf16* __restrict__ qkv, float* __restrict__ probs,
                                                                bf16* __restrict__ out, int T, int H) {
  __shared__ __align__(16) bf16 Qs[kTile];
  __shared__ __align__(16) bf16 Ks[kTile];
  __shared__ __align__(16) bf16 Vt[kTile];
  const int h = blockIdx.x, b = blockIdx.y, D = H * kDh;
  const size_t ld = 3 * (size_t)D;
  const bf16* base = qkv + (size_t)b * T * ld + h * kDh;
  load_rows(Qs, base, ld, T);
  load_rows(Ks, base + D, ld, T);
  load_rows_t(Vt, base + 2 * D, ld, T);
  __syncthreads();
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, m0 = (threadIdx.x >> 5) * 16;
  if (m0 >= T) return;  // no barrier below
  float s[8][4] = {};
  gemm_tile<false>(s, Qs, m0, Ks, g, t);  // S[q][k] = Q[q] . K[k]: B^T = K, row-major
  float mx[2] = {-INFINITY, -INFINITY}, sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[j][e] = frag_col(j, t, e) < T ? s[j][e] * kScale : -INFINITY;
      mx[e >> 1] = fmaxf(mx[e >> 1], s[j][e]);
    }
  mx[0] = row_max(mx[0]);
  mx[1] = row_max(mx[1]);
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[j][e] = expf(s[j][e] - mx[e >> 1]);  // 0 for the padded columns
      sum[e >> 1] += s[j][e];
    }
  const float inv[2] = {1.0f / row_sum(sum[0]), 1.0f / row_sum(sum[1])};
  float* P = probs + (size_t)(b * H + h) * T * T;
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[j][e] *= inv[e >> 1];
      const int r = frag_row(m0, g, e), c = frag_col(j, t, e);
      if (r < T && c < T) P[r * T + c] = s[j][e];
    }
  float o[8][4] = {};
  gemm_regs(o, s, Vt, g, t);  // O = P V: B^T = V^T
  store_rows(out + (size_t)b * T * D + h * kDh, D, o, m0, g, t, T);
}

// One block per (head, batch): dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(P dP)) / 8,
// dQ = dS K, dK = dS^T Q. Tiles: V, K^T, Q^T, dO^T, and P^T (hi, lo) which later holds dS^T.
__global__ void __launch_bounds__(kThreads) attn_bwd_mma_kernel(const bf16* __restrict__ qkv,
                                                                const float* __restrict__ probs,
                                                                const bf16* __restrict__ dout, bf16* __restrict__ dqkv,
                                                                int T, int H) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* Vs = reinterpret_cast<bf16*>(smem_raw);
  bf16 *Kt = Vs + kTile, *Qt = Vs + 2 * kTile, *dOt = Vs + 3 * kTile, *Th = Vs + 4 * kTile, *Tl = Vs + 5 * kTile;
  const int h = blockIdx.x, b = blockIdx.y, D = H * kDh;
  const size_t ld = 3 * (size_t)D;
  const bf16* base = qkv + (size_t)b * T * ld + h * kDh;
  load_rows(Vs, base + 2 * D, ld, T);
  load_rows_t(Kt, base + D, ld, T);
  load_rows_t(Qt, base, ld, T);
  load_rows_t(dOt, dout + (size_t)b * T * D + h * kDh, D, T);
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, m0 = (threadIdx.x >> 5) * 16;
  // The warp's query rows of P (zero outside T x T), and P^T as hi + lo tiles.
  const float* P = probs + (size_t)(b * H + h) * T * T;
  float p[8][4];
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = frag_row(m0, g, e), c = frag_col(j, t, e);
      p[j][e] = r < T && c < T ? __ldg(P + r * T + c) : 0.0f;
      const bf16 hi = __float2bfloat16_rn(p[j][e]);
      Th[c * kLd + r] = hi;
      Tl[c * kLd + r] = __float2bfloat16_rn(p[j][e] - __bfloat162float(hi));
    }
  __syncthreads();
  bf16* drow = dqkv + (size_t)b * T * ld + h * kDh;
  {
    float dv[8][4] = {};
    gemm_split_tile(dv, Th, Tl, m0, dOt, g, t);  // dV[k] = sum_q P[q][k] dO[q]: rows = keys
    store_rows(drow + 2 * D, ld, dv, m0, g, t, T);
  }
  float dp[8][4] = {};
  gemm_tile<true>(dp, dOt, m0, Vs, g, t);  // dP[q][k] = dO[q] . V[k]
  float delta[2] = {0.0f, 0.0f};
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) delta[e >> 1] += p[j][e] * dp[j][e];
  delta[0] = row_sum(delta[0]);
  delta[1] = row_sum(delta[1]);
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) dp[j][e] = p[j][e] * (dp[j][e] - delta[e >> 1]) * kScale;  // dS / 8
  __syncthreads();  // every warp is done with P^T (dV)
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = frag_row(m0, g, e), c = frag_col(j, t, e);
      const bf16 hi = __float2bfloat16_rn(dp[j][e]);
      Th[c * kLd + r] = hi;
      Tl[c * kLd + r] = __float2bfloat16_rn(dp[j][e] - __bfloat162float(hi));
    }
  {
    float dq[8][4] = {};
    gemm_regs(dq, dp, Kt, g, t);  // dQ[q] = sum_k dS[q][k] K[k] / 8
    store_rows(drow, ld, dq, m0, g, t, T);
  }
  __syncthreads();  // dS^T complete
  float dk[8][4] = {};
  gemm_split_tile(dk, Th, Tl, m0, Qt, g, t);  // dK[k] = sum_q dS[q][k] Q[q] / 8: rows = keys
  store_rows(drow + D, ld, dk, m0, g, t, T);
}

}  // namespace

bool attention_mma_shape(int T, int head_dim) { return T >= 1 && T <= kT && head_dim == kDh; }

bool attention_mma_fits(int T, int head_dim, const void* qkv, const void* out_or_dout, const void* dqkv) {
  return attention_mma_shape(T, head_dim) && aligned16(qkv) && aligned16(out_or_dout) && aligned16(dqkv);
}

void attention_forward_mma(const bf16* qkv, float* probs, bf16* out, int batch, int T, int heads, cudaStream_t stream) {
  attn_fwd_mma_kernel<<<dim3(heads, batch), kThreads, 0, stream>>>(qkv, probs, out, T, heads);
  CUDA_CHECK_LAUNCH();
}

void attention_backward_mma(const bf16* qkv, const float* probs, const bf16* dout, bf16* dqkv, int batch, int T,
                            int heads, cudaStream_t stream) {
  CUDA_CHECK(cudaFuncSetAttribute(attn_bwd_mma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kBwdSmem));
  attn_bwd_mma_kernel<<<dim3(heads, batch), kThreads, kBwdSmem, stream>>>(qkv, probs, dout, dqkv, T, heads);
  CUDA_CHECK_LAUNCH();
}

}  // namespace vitddp
