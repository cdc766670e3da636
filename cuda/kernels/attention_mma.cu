#include "cuda/kernels/attention_mma.h"

#include <cstdint>

#include "cuda/check/check_cuda.h"
#include "cuda/kernels/vec4.cuh"

namespace vitddp {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kT = 64;            // rows and columns of every tile (the sequence padded to 64)
constexpr int kDh = 64;           // head dimension
constexpr int kLd = 72;           // shared-memory row stride in elements (bf16: 36 words, fp32: 72):
                                  // the rows of one fragment load start in distinct banks
constexpr int kTile = kT * kLd;   // elements of one tile
constexpr int kThreads = 128;     // 4 warps; warp w owns rows 16w .. 16w + 15 of each product
constexpr float kScale = 0.125f;  // 1 / sqrt(kDh)

using Acc = float[8][4];  // a warp's 16 x 64 fp32 result: 8 C fragments, columns 8j .. 8j + 7
// C fragment of mma.sync m16n8 (f32), both operand types: c0, c1 = (g, 2t), (g, 2t+1);
// c2, c3 = (g+8, 2t), (g+8, 2t+1), with lane = 4 g + t.

// ldmatrix.sync.aligned.m8n8.x4 (PTX ISA, "Warp-level matrix load instruction: ldmatrix"): lanes
// 8i .. 8i + 7 give the 16-byte rows of 8 x 8 matrix i, and lane 4g + t receives in register i
// row g, columns 2t and 2t + 1 of matrix i (.trans: rows 2t and 2t + 1 of column g), the lower
// index in the low half: exactly an mma.m16n8k16 bf16 fragment register. kTrans: the .trans form.
template <bool kTrans>
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* row) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  if constexpr (kTrans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}

// Operand type bf16: mma.sync.m16n8k16, tiles hold bf16 (PTX ISA, "Matrix Fragments for
// mma.m16n8k16"): A a0 = (g, 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8, 2t+8..);
// B b0 = (k 2t..2t+1, n g), b1 = (k 2t+8.., n g); two bf16 per register, the lower index low.
// Every tile is row-major as in global memory (16-byte copies); the fragments of a transposed
// operand come from ldmatrix.trans. An fp32 operand (P, dS) is kept as two row-major tiles, hi and
// lo, read transposed. The fragments hold the same values as scalar loads would (lane 4g + t).
struct Bf16Op {
  using E = bf16;
  static constexpr int kK = 16;
  static constexpr int kSplitTiles = 2;
  static constexpr bool kRowMajor = true;  // tiles as in memory; P and dS stored row-major
  __device__ static uint32_t pair(E lo, E hi) {
    return static_cast<uint32_t>(__bfloat16_as_ushort(lo)) | (static_cast<uint32_t>(__bfloat16_as_ushort(hi)) << 16);
  }
  __device__ static void mma(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
  // Matrix i = lane / 8 of an x4 load, and the row of it that this lane addresses.
  __device__ static int ldsm_matrix(int g, int t) { return (4 * g + t) >> 3; }
  __device__ static int ldsm_row(int g, int t) { return (4 * g + t) & 7; }
  // A = M[m0.., k0..] of a row-major tile M[m][k]: matrices (m0, k0), (m0 + 8, k0), (m0, k0 + 8),
  // (m0 + 8, k0 + 8).
  __device__ static void load_a(uint32_t (&a)[4], const E* M, int m0, int k0, int g, int t) {
    const int i = ldsm_matrix(g, t);
    ldsm_x4<false>(a, M + (m0 + ldsm_row(g, t) + 8 * (i & 1)) * kLd + k0 + 8 * (i >> 1));
  }
  // A = M[m0.., k0..] where the tile holds its transpose, Mt[k][m]: the same four blocks of Mt,
  // transposed.
  __device__ static void load_a_t(uint32_t (&a)[4], const E* Mt, int m0, int k0, int g, int t) {
    const int i = ldsm_matrix(g, t);
    ldsm_x4<true>(a, Mt + (k0 + ldsm_row(g, t) + 8 * (i >> 1)) * kLd + m0 + 8 * (i & 1));
  }
  // B[k][n] for k0.., columns n0.. (b[0]) and n0 + 8.. (b[1]): kTrans false from a tile holding
  // Bt[n][k], true from a tile holding B[k][n] itself (matrices i = 0..3 land in b[i / 2][i % 2]).
  template <bool kTrans>
  __device__ static void load_b2(uint32_t (&b)[2][2], const E* tile, int n0, int k0, int g, int t) {
    const int i = ldsm_matrix(g, t), row = ldsm_row(g, t);
    uint32_t r[4];
    ldsm_x4<kTrans>(r, kTrans ? tile + (k0 + row + 8 * (i & 1)) * kLd + n0 + 8 * (i >> 1)
                              : tile + (n0 + row + 8 * (i >> 1)) * kLd + k0 + 8 * (i & 1));
    b[0][0] = r[0];
    b[0][1] = r[1];
    b[1][0] = r[2];
    b[1][1] = r[3];
  }
  // x = hi + lo, both bf16 (hi + lo keeps about 16 bits of x).
  __device__ static void split(float x, E& hi, E& lo) {
    hi = __float2bfloat16_rn(x);
    lo = __float2bfloat16_rn(x - __bfloat162float(hi));
  }
  // A fragments (hi, lo) of k-step kk from a warp's fp32 result x: its C fragments 2kk and
  // 2kk + 1 cover the same 16 x 16 block.
  __device__ static void split_a(uint32_t (&hi)[4], uint32_t (&lo)[4], const Acc& x, int kk) {
    const float v[8] = {x[2 * kk][0],     x[2 * kk][1],     x[2 * kk][2],     x[2 * kk][3],
                        x[2 * kk + 1][0], x[2 * kk + 1][1], x[2 * kk + 1][2], x[2 * kk + 1][3]};
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      E h0, l0, h1, l1;
      split(v[2 * r], h0, l0);
      split(v[2 * r + 1], h1, l1);
      hi[r] = pair(h0, h1);
      lo[r] = pair(l0, l1);
    }
  }
  // The fp32 values v0, v1 into elements i, i + 1 (i even) of a split operand's tiles (hi, lo).
  __device__ static void store_split_pair(E* T, int i, float v0, float v1) {
    E h0, l0, h1, l1;
    split(v0, h0, l0);
    split(v1, h1, l1);
    *reinterpret_cast<uint32_t*>(T + i) = pair(h0, h1);
    *reinterpret_cast<uint32_t*>(T + kTile + i) = pair(l0, l1);
  }
  // A fragments (hi, lo) of the transpose of a split operand's row-major tiles.
  __device__ static void load_a_split_t(uint32_t (&hi)[4], uint32_t (&lo)[4], const E* T, int m0, int k0, int g,
                                        int t) {
    load_a_t(hi, T, m0, k0, g, t);
    load_a_t(lo, T + kTile, m0, k0, g, t);
  }
  __device__ static uint32_t pack(float lo, float hi) { return pair(__float2bfloat16_rn(lo), __float2bfloat16_rn(hi)); }
};

// Operand type tf32: mma.sync.m16n8k8 on fp32 tiles rounded to tf32 (cvt.rna). The PTX fragments
// are A a0 = (g, t), a1 = (g+8, t), a2 = (g, t+4), a3 = (g+8, t+4); B b0 = (k t, n g), b1 =
// (k t+4, n g). The k index is permuted within each k-step (t -> 2t, t+4 -> 2t+1) on both A and B,
// which leaves the product unchanged, so that a C fragment (columns 2t, 2t+1) is directly an A
// fragment and A and B come as 8-byte pairs. An fp32 operand (P, dS) is one fp32 tile, split
// into tf32 hi + lo (about 21 bits) as it is loaded.
struct Tf32Op {
  using E = float;
  static constexpr int kK = 8;
  static constexpr int kSplitTiles = 1;
  static constexpr bool kRowMajor = false;  // tiles transposed on load where a product needs it
  __device__ static uint32_t tf32(float x) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
  }
  __device__ static void mma(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
  // Tiles hold values already rounded to tf32 (put16), except the split operand's (store_split).
  __device__ static void load_a(uint32_t (&a)[4], const E* M, int m0, int k0, int g, int t) {
    const E* p = M + (m0 + g) * kLd + k0 + 2 * t;
    const float2 r0 = *reinterpret_cast<const float2*>(p), r1 = *reinterpret_cast<const float2*>(p + 8 * kLd);
    a[0] = __float_as_uint(r0.x);
    a[2] = __float_as_uint(r0.y);
    a[1] = __float_as_uint(r1.x);
    a[3] = __float_as_uint(r1.y);
  }
  __device__ static void load_a_t(uint32_t (&a)[4], const E* Mt, int m0, int k0, int g, int t) {
    const E* p = Mt + (k0 + 2 * t) * kLd + m0 + g;
    a[0] = __float_as_uint(p[0]);
    a[2] = __float_as_uint(p[kLd]);
    a[1] = __float_as_uint(p[8]);
    a[3] = __float_as_uint(p[kLd + 8]);
  }
  __device__ static void load_b(uint32_t (&b)[2], const E* Bt, int n0, int k0, int g, int t) {
    const float2 v = *reinterpret_cast<const float2*>(Bt + (n0 + g) * kLd + k0 + 2 * t);
    b[0] = __float_as_uint(v.x);
    b[1] = __float_as_uint(v.y);
  }
  __device__ static void load_b_t(uint32_t (&b)[2], const E* B, int n0, int k0, int g, int t) {
    const E* p = B + (k0 + 2 * t) * kLd + n0 + g;
    b[0] = __float_as_uint(p[0]);
    b[1] = __float_as_uint(p[kLd]);
  }
  __device__ static void split(float x, uint32_t& hi, uint32_t& lo) {
    hi = tf32(x);
    lo = tf32(x - __uint_as_float(hi));
  }
  // k-step kk = C fragment kk: a0 = c0 (g, 2t), a1 = c2 (g+8, 2t), a2 = c1, a3 = c3.
  __device__ static void split_a(uint32_t (&hi)[4], uint32_t (&lo)[4], const Acc& x, int kk) {
    split(x[kk][0], hi[0], lo[0]);
    split(x[kk][2], hi[1], lo[1]);
    split(x[kk][1], hi[2], lo[2]);
    split(x[kk][3], hi[3], lo[3]);
  }
  __device__ static void store_split(E* T, int i, float v) { T[i] = v; }
  __device__ static void load_a_split(uint32_t (&hi)[4], uint32_t (&lo)[4], const E* T, int m0, int k0, int g, int t) {
    const E* p = T + (m0 + g) * kLd + k0 + 2 * t;
    const float2 r0 = *reinterpret_cast<const float2*>(p), r1 = *reinterpret_cast<const float2*>(p + 8 * kLd);
    split(r0.x, hi[0], lo[0]);
    split(r1.x, hi[1], lo[1]);
    split(r0.y, hi[2], lo[2]);
    split(r1.y, hi[3], lo[3]);
  }
  // 16 bytes of global input (4 fp32) into tile elements dst[k * stride], k < 4, rounded to tf32.
  __device__ static void put16(E* dst, int stride, const uint4& v) {
    const float* e = reinterpret_cast<const float*>(&v);
#pragma unroll
    for (int k = 0; k < 4; ++k) dst[k * stride] = __uint_as_float(tf32(e[k]));
  }
};

// Calls f(j, b) with the B fragment b of columns 8j .. 8j + 7 (j < 8) at k-step k0, from a tile
// holding B^T or (kPlainB) B itself (the same values either way): Bf16Op loads two column groups
// with one ldmatrix, Tf32Op one group at a time, each used before the next is loaded.
template <class Op, bool kPlainB, class F>
__device__ __forceinline__ void for_each_b(const typename Op::E* Bt, int k0, int g, int t, F&& f) {
#pragma unroll
  for (int j = 0; j < 8; j += 2) {
    if constexpr (Op::kRowMajor) {
      uint32_t b[2][2];
      Op::template load_b2<kPlainB>(b, Bt, 8 * j, k0, g, t);
      f(j, b[0]);
      f(j + 1, b[1]);
    } else {
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        uint32_t b[2];
        if constexpr (kPlainB)
          Op::load_b_t(b, Bt, 8 * (j + u), k0, g, t);
        else
          Op::load_b(b, Bt, 8 * (j + u), k0, g, t);
        f(j + u, b);
      }
    }
  }
}
// acc += (the warp's rows of A) x B, K = 64: A from a row-major (or transposed) tile, B as in
// for_each_b. The products run in the same order whatever the tiles' orientation, so the result
// does not depend on it.
template <class Op, bool kTransposedA, bool kPlainB = false>
__device__ __forceinline__ void gemm_tile(Acc& acc, const typename Op::E* A, int m0, const typename Op::E* Bt, int g,
                                          int t) {
#pragma unroll
  for (int k0 = 0; k0 < kDh; k0 += Op::kK) {
    uint32_t a[4];
    if (kTransposedA) Op::load_a_t(a, A, m0, k0, g, t);
    else Op::load_a(a, A, m0, k0, g, t);
    for_each_b<Op, kPlainB>(Bt, k0, g, t, [&](int j, const uint32_t(&b)[2]) { Op::mma(acc[j], a, b); });
  }
}
// acc += (hi + lo) x B for k-step k0 (hi, lo: A fragments of a split fp32 operand), hi then lo
// into each accumulator.
template <class Op, bool kPlainB>
__device__ __forceinline__ void mma_split_step(Acc& acc, const uint32_t (&hi)[4], const uint32_t (&lo)[4],
                                               const typename Op::E* Bt, int k0, int g, int t) {
  for_each_b<Op, kPlainB>(Bt, k0, g, t, [&](int j, const uint32_t(&b)[2]) {
    Op::mma(acc[j], hi, b);
    Op::mma(acc[j], lo, b);
  });
}
// acc += A x B with A a split operand's tiles (hi + lo): row-major, or (kTransposedA) holding A^T.
template <class Op, bool kTransposedA, bool kPlainB>
__device__ __forceinline__ void gemm_split_tile(Acc& acc, const typename Op::E* T, int m0, const typename Op::E* Bt,
                                                int g, int t) {
#pragma unroll
  for (int k0 = 0; k0 < kT; k0 += Op::kK) {
    uint32_t hi[4], lo[4];
    if constexpr (kTransposedA)
      Op::load_a_split_t(hi, lo, T, m0, k0, g, t);
    else
      Op::load_a_split(hi, lo, T, m0, k0, g, t);
    mma_split_step<Op, kPlainB>(acc, hi, lo, Bt, k0, g, t);
  }
}
// acc += x B with x the warp's own fp32 16 x 64 result (split into hi + lo); B as in gemm_tile.
template <class Op, bool kPlainB>
__device__ __forceinline__ void gemm_regs(Acc& acc, const Acc& x, const typename Op::E* Bt, int g, int t) {
#pragma unroll
  for (int kk = 0; kk < kT / Op::kK; ++kk) {
    uint32_t hi[4], lo[4];
    Op::split_a(hi, lo, x, kk);
    mma_split_step<Op, kPlainB>(acc, hi, lo, Bt, kk * Op::kK, g, t);
  }
}

// The warp's 16 x 64 fp32 result x (P or dS) into the split operand's tiles: row-major bf16 pairs
// (Bf16Op, read back transposed by ldmatrix.trans), or its transpose, one fp32 at a time (Tf32Op).
template <class Op>
__device__ __forceinline__ void store_split_tile(typename Op::E* Ts, const Acc& x, int m0, int g, int t) {
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = m0 + g + 8 * half, c = 8 * j + 2 * t;
      if constexpr (Op::kRowMajor) {
        Op::store_split_pair(Ts, r * kLd + c, x[j][2 * half], x[j][2 * half + 1]);
      } else {
        Op::store_split(Ts, c * kLd + r, x[j][2 * half]);
        Op::store_split(Ts, (c + 1) * kLd + r, x[j][2 * half + 1]);
      }
    }
}

// Column c of element e (0..3) of C fragment j (row g + 8 * (e >> 1) of the warp's 16).
__device__ __forceinline__ int frag_col(int j, int t, int e) { return 8 * j + 2 * t + (e & 1); }

// Rows [0, 64) x 64 columns at src (row stride ld elements) into the tile dst[r][c]; rows >= T
// zero. 16-byte loads; tf32 tiles are rounded to tf32 on the way.
template <class Op>
__device__ __forceinline__ void load_rows(typename Op::E* dst, const typename Op::E* src, size_t ld, int T) {
  constexpr int kV = 16 / sizeof(typename Op::E), kPerRow = kDh / kV;
  for (int i = threadIdx.x; i < kT * kPerRow; i += kThreads) {
    const int r = i / kPerRow, c = (i % kPerRow) * kV;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < T) v = __ldg(reinterpret_cast<const uint4*>(src + r * ld + c));
    if constexpr (Op::kK == 16) *reinterpret_cast<uint4*>(dst + r * kLd + c) = v;
    else Op::put16(dst + r * kLd + c, 1, v);
  }
}
// The same rows into the transposed tile dst[c][r] (a warp takes 32 consecutive rows of one
// column group, so its stores fill consecutive words).
template <class Op>
__device__ __forceinline__ void load_rows_t(typename Op::E* dst, const typename Op::E* src, size_t ld, int T) {
  constexpr int kV = 16 / sizeof(typename Op::E), kPerRow = kDh / kV;
  for (int i = threadIdx.x; i < kT * kPerRow; i += kThreads) {
    const int r = i & (kT - 1), c = (i / kT) * kV;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < T) v = __ldg(reinterpret_cast<const uint4*>(src + r * ld + c));
    Op::put16(dst + c * kLd + r, kLd, v);
  }
}
// load_rows_t (kTransposed) or load_rows.
template <class Op, bool kTransposed>
__device__ __forceinline__ void load_tile(typename Op::E* dst, const typename Op::E* src, size_t ld, int T) {
  if constexpr (kTransposed)
    load_rows_t<Op>(dst, src, ld, T);
  else
    load_rows<Op>(dst, src, ld, T);
}

// The warp's rows (< T) of x into dst[r * ld + c] (c < 64): bf16 pairs or fp32 pairs.
template <class Op>
__device__ __forceinline__ void store_rows(typename Op::E* dst, size_t ld, const Acc& x, int m0, int g, int t, int T) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = m0 + g + 8 * half;
    if (r >= T) continue;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      typename Op::E* p = dst + r * ld + 8 * j + 2 * t;
      if constexpr (Op::kK == 16) *reinterpret_cast<uint32_t*>(p) = Op::pack(x[j][2 * half], x[j][2 * half + 1]);
      else *reinterpret_cast<float2*>(p) = make_float2(x[j][2 * half], x[j][2 * half + 1]);
    }
  }
}

// The column sums of the block's rows (< T) of x as store_rows stores them (bf16-rounded values
// widened again, or fp32), into out[c] (c < 64): each lane adds its two rows, the 8 lanes of a
// column (lanes t, t + 4, ..., t + 28) add theirs, then thread c adds the 4 warps' sums in warp
// order: a fixed order (deterministic). Every thread of the block must call it (two barriers).
// Its 1 KiB of static shared memory keeps the bf16 backward at 4 blocks an SM (4 x 56 KiB with the
// 1 KiB each block reserves, of 228 KiB): a [3][4][64] buffer for all three tensors with one barrier
// at the end (3 KiB) allows 3 (results/h100/qkv-bias-in-attention/one-barrier).
template <class Op>
__device__ __forceinline__ void column_sums(const Acc& x, int m0, int g, int t, int T, float* __restrict__ out) {
  __shared__ float red[kThreads / 32][kDh];
  float s[8][2];
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      s[j][c] = 0.0f;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float v = x[j][2 * half + c];
        const float stored = Op::kK == 16 ? __bfloat162float(__float2bfloat16_rn(v)) : v;
        if (m0 + g + 8 * half < T) s[j][c] += stored;
      }
#pragma unroll
      for (int o = 4; o < 32; o <<= 1) s[j][c] += __shfl_xor_sync(0xffffffffu, s[j][c], o);
    }
  if (g == 0)
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      red[threadIdx.x >> 5][8 * j + 2 * t] = s[j][0];
      red[threadIdx.x >> 5][8 * j + 2 * t + 1] = s[j][1];
    }
  __syncthreads();
  if (threadIdx.x < kDh) {
    float sum = red[0][threadIdx.x];
#pragma unroll
    for (int w = 1; w < kThreads / 32; ++w) sum += red[w][threadIdx.x];
    out[threadIdx.x] = sum;
  }
  __syncthreads();  // red is reused by the next call
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

template <class Op>
constexpr size_t fwd_smem() { return 3 * kTile * sizeof(typename Op::E); }
template <class Op>
constexpr size_t bwd_smem() { return (4 + Op::kSplitTiles) * kTile * sizeof(typename Op::E); }

// The warp's 16 rows of S = Q K^T / 8 (acc holds Q K^T), columns >= T at -inf. The scale is a
// power of two, so the product is exact; __fmul_rn keeps it from being contracted into what follows.
__device__ __forceinline__ void scale_scores(Acc& s, int T, int t) {
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[j][e] = frag_col(j, t, e) < T ? __fmul_rn(s[j][e], kScale) : -INFINITY;
}
// One probability from its score and its row's statistics (max, 1 / sum): the forward and the
// backward both compute P through this, from bit-identical scores.
// (The forward keeps the exponentials of its row sums and scales them: the same two operations.)
__device__ __forceinline__ float softmax_term(float s, float mx, float inv) { return __fmul_rn(expf(s - mx), inv); }

// One block per (head, batch): S = Q K^T / 8, P = softmax(S), O = P V; each row's max and 1 / sum
// go to stats (the backward recomputes P from them instead of reading [T, T] probabilities).
template <class Op>
__global__ void __launch_bounds__(kThreads)
    attn_fwd_mma_kernel(const typename Op::E* __restrict__ qkv, float2* __restrict__ stats,
                        typename Op::E* __restrict__ out, int T, int H) {
  using E = typename Op::E;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  constexpr bool kRM = Op::kRowMajor;
  E* Qs = reinterpret_cast<E*>(smem_raw);
  E *Ks = Qs + kTile, *Vx = Qs + 2 * kTile;  // Vx: V (kRM) or V^T
  const int h = blockIdx.x, b = blockIdx.y, D = H * kDh;
  const size_t ld = 3 * (size_t)D;
  const E* base = qkv + (size_t)b * T * ld + h * kDh;
  load_rows<Op>(Qs, base, ld, T);
  load_rows<Op>(Ks, base + D, ld, T);
  load_tile<Op, !kRM>(Vx, base + 2 * D, ld, T);
  __syncthreads();
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, m0 = (threadIdx.x >> 5) * 16;
  if (m0 >= T) return;  // no barrier below
  float s[8][4] = {};
  gemm_tile<Op, false>(s, Qs, m0, Ks, g, t);  // S[q][k] = Q[q] . K[k]: B^T = K, row-major
  scale_scores(s, T, t);
  float mx[2] = {-INFINITY, -INFINITY}, sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) mx[e >> 1] = fmaxf(mx[e >> 1], s[j][e]);
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
  // softmax_term's value: the same exponential times the same 1 / sum.
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[j][e] = __fmul_rn(s[j][e], inv[e >> 1]);
  float2* st = stats + (size_t)(b * H + h) * T;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = m0 + g + 8 * half;
    if (t == 0 && r < T) st[r] = make_float2(mx[half], inv[half]);
  }
  float o[8][4] = {};
  gemm_regs<Op, kRM>(o, s, Vx, g, t);  // O = P V
  store_rows<Op>(out + (size_t)b * T * D + h * kDh, D, o, m0, g, t, T);
}

// One block per (head, batch): P recomputed from Q, K and the forward's row statistics (the same
// fragments and products as the forward's, so the same P bit for bit), dV = P^T dO, dP = dO V^T,
// dS = P (dP - rowsum(P dP)) / 8, dQ = dS K, dK = dS^T Q. Tiles: V, K, Q, dO, and the split
// operand P (later dS), as below. With colsum: the column sums of the block's T rows of dQ, dK and dV as
// stored, at the same offsets in row b of colsum [batch, 3D] as in dqkv's rows.
template <class Op>
__global__ void __launch_bounds__(kThreads)
    attn_bwd_mma_kernel(const typename Op::E* __restrict__ qkv, const float2* __restrict__ stats,
                        const typename Op::E* __restrict__ dout, typename Op::E* __restrict__ dqkv,
                        float* __restrict__ colsum, int T, int H) {
  using E = typename Op::E;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  // Bf16Op keeps every tile as in memory (kRM) and reads transposed fragments through
  // ldmatrix.trans; Tf32Op keeps K, Q and dO transposed, and the split tiles hold P^T and dS^T.
  constexpr bool kRM = Op::kRowMajor;
  E* Vs = reinterpret_cast<E*>(smem_raw);
  E *Kx = Vs + kTile, *Qx = Vs + 2 * kTile, *dOx = Vs + 3 * kTile, *Ts = Vs + 4 * kTile;
  const int h = blockIdx.x, b = blockIdx.y, D = H * kDh;
  const size_t ld = 3 * (size_t)D;
  const E* base = qkv + (size_t)b * T * ld + h * kDh;
  load_rows<Op>(Vs, base + 2 * D, ld, T);
  load_tile<Op, !kRM>(Kx, base + D, ld, T);
  load_tile<Op, !kRM>(Qx, base, ld, T);
  load_tile<Op, !kRM>(dOx, dout + (size_t)b * T * D + h * kDh, D, T);
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, m0 = (threadIdx.x >> 5) * 16;
  // The warp's query rows of P (zero outside T x T: padded rows have no statistics, mx = inv = 0,
  // and zero Q rows, so exp(0) x 0), and P into the split tiles.
  float2 row[2] = {make_float2(0.0f, 0.0f), make_float2(0.0f, 0.0f)};
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = m0 + g + 8 * half;
    if (r < T) row[half] = __ldg(stats + (size_t)(b * H + h) * T + r);
  }
  __syncthreads();  // Q and K loaded
  float p[8][4] = {};
  gemm_tile<Op, !kRM, !kRM>(p, Qx, m0, Kx, g, t);  // S = Q K^T
  scale_scores(p, T, t);
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) p[j][e] = softmax_term(p[j][e], row[e >> 1].x, row[e >> 1].y);
  store_split_tile<Op>(Ts, p, m0, g, t);
  __syncthreads();  // P stored
  E* drow = dqkv + (size_t)b * T * ld + h * kDh;
  float* const csum = colsum ? colsum + (size_t)b * ld + h * kDh : nullptr;  // uniform over the block
  {
    float dv[8][4] = {};
    gemm_split_tile<Op, kRM, kRM>(dv, Ts, m0, dOx, g, t);  // dV[k] = sum_q P[q][k] dO[q]: rows = keys
    store_rows<Op>(drow + 2 * D, ld, dv, m0, g, t, T);
    if (csum) column_sums<Op>(dv, m0, g, t, T, csum + 2 * D);
  }
  float dp[8][4] = {};
  gemm_tile<Op, !kRM>(dp, dOx, m0, Vs, g, t);  // dP[q][k] = dO[q] . V[k]
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
  __syncthreads();  // every warp is done with P (dV)
  store_split_tile<Op>(Ts, dp, m0, g, t);
  {
    float dq[8][4] = {};
    gemm_regs<Op, kRM>(dq, dp, Kx, g, t);  // dQ[q] = sum_k dS[q][k] K[k] / 8
    store_rows<Op>(drow, ld, dq, m0, g, t, T);
    if (csum) column_sums<Op>(dq, m0, g, t, T, csum);
  }
  __syncthreads();  // dS complete
  float dk[8][4] = {};
  gemm_split_tile<Op, kRM, kRM>(dk, Ts, m0, Qx, g, t);  // dK[k] = sum_q dS[q][k] Q[q] / 8: rows = keys
  store_rows<Op>(drow + D, ld, dk, m0, g, t, T);
  if (csum) column_sums<Op>(dk, m0, g, t, T, csum + D);
}

template <class Op>
void forward(const typename Op::E* qkv, float* stats, typename Op::E* out, int batch, int T, int heads,
             cudaStream_t stream) {
  constexpr size_t smem = fwd_smem<Op>();
  if (smem > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(attn_fwd_mma_kernel<Op>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  attn_fwd_mma_kernel<Op><<<dim3(heads, batch), kThreads, smem, stream>>>(qkv, reinterpret_cast<float2*>(stats), out, T,
                                                                       heads);
  CUDA_CHECK_LAUNCH();
}

template <class Op>
void backward(const typename Op::E* qkv, const float* stats, const typename Op::E* dout, typename Op::E* dqkv,
              float* colsum, int batch, int T, int heads, cudaStream_t stream) {
  constexpr size_t smem = bwd_smem<Op>();
  CUDA_CHECK(cudaFuncSetAttribute(attn_bwd_mma_kernel<Op>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  attn_bwd_mma_kernel<Op><<<dim3(heads, batch), kThreads, smem, stream>>>(qkv, reinterpret_cast<const float2*>(stats),
                                                                          dout, dqkv, colsum, T, heads);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

static_assert(kT == kMmaMaxSeqLen && kDh == kMmaHeadDim, "attention_mma_shape (model/kernel_choice.h) must describe these tiles");

bool attention_mma_fits(int T, int head_dim, const void* qkv, const void* out_or_dout, const void* dqkv) {
  return attention_mma_shape(T, head_dim) && aligned16(qkv) && aligned16(out_or_dout) && aligned16(dqkv);
}

void attention_forward_mma(const bf16* qkv, float* stats, bf16* out, int batch, int T, int heads, cudaStream_t stream) {
  forward<Bf16Op>(qkv, stats, out, batch, T, heads, stream);
}

void attention_backward_mma(const bf16* qkv, const float* stats, const bf16* dout, bf16* dqkv, int batch, int T,
                            int heads, cudaStream_t stream, float* dqkv_colsum) {
  backward<Bf16Op>(qkv, stats, dout, dqkv, dqkv_colsum, batch, T, heads, stream);
}

void attention_forward_mma_tf32(const float* qkv, float* stats, float* out, int batch, int T, int heads,
                                cudaStream_t stream) {
  forward<Tf32Op>(qkv, stats, out, batch, T, heads, stream);
}

void attention_backward_mma_tf32(const float* qkv, const float* stats, const float* dout, float* dqkv, int batch, int T,
                                 int heads, cudaStream_t stream, float* dqkv_colsum) {
  backward<Tf32Op>(qkv, stats, dout, dqkv, dqkv_colsum, batch, T, heads, stream);
}

}  // namespace vitddp
