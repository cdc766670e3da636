#include "cuda/kernels/attention.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "cuda/kernels/attention_mma.h"
#include "cuda/kernels/block_reduce.cuh"
#include "cuda/check/check_cuda.h"
#include "cuda/kernels/dtype.cuh"

namespace vitddp {
namespace {

constexpr int kWarps = 4;      // warps per block; each warp owns one query (or key) row at a time
constexpr int kTile = 16;      // query rows (forward, backward A) or key rows (backward B) per block
constexpr int kMaxJ = 16;      // key slots per lane: T <= 32 * kMaxJ
constexpr int kMaxD = 4;       // head-dim slots per lane: dh <= 32 * kMaxD

struct Dims {
  int T, H, dh, D, ld, Tpad, jpl, dpl;
  float scale;
};

Dims make_dims(int T, int heads, int dh) {
  Dims m;
  m.T = T;
  m.H = heads;
  m.dh = dh;
  m.D = heads * dh;
  m.ld = 3 * m.D;
  m.jpl = (T + 31) / 32;
  m.Tpad = m.jpl * 32;
  m.dpl = (dh + 31) / 32;
  m.scale = 1.0f / sqrtf((float)dh);
  return m;
}

// Shared memory (bytes) of the general path's kernels for these dims (forward_impl / backward_impl).
size_t fwd_smem(const Dims& m) {
  return sizeof(float) * ((size_t)m.Tpad * (m.dh + 1) + (size_t)m.T * m.dh + (size_t)kTile * m.dh + (size_t)kWarps * m.Tpad);
}
size_t bwd_query_smem(const Dims& m) {
  return sizeof(float) * (2 * (size_t)m.Tpad * (m.dh + 1) + (size_t)kTile * m.dh + (size_t)kWarps * m.Tpad);
}
size_t bwd_key_smem(const Dims& m) { return sizeof(float) * (2 * (size_t)m.T * m.dh + (size_t)kWarps * 2 * m.T); }

void check(int batch, int T, int heads, int dh, const char* what) {
  const std::string shape = std::string(what) + ": unsupported shape B=" + std::to_string(batch) + " T=" +
                            std::to_string(T) + " heads=" + std::to_string(heads) + " head_dim=" + std::to_string(dh);
  if (batch < 1 || T < 1 || T > 32 * kMaxJ || heads < 1 || dh < 1 || dh > 32 * kMaxD || batch > 65535 || heads > 65535)
    throw std::invalid_argument(shape + " (need T <= 512, head_dim <= 128, B and heads <= 65535)");
  const Dims m = make_dims(T, heads, dh);
  const size_t need = std::max({fwd_smem(m), bwd_query_smem(m), bwd_key_smem(m)});
  if (need <= 48 * 1024) return;  // every CUDA device allows 48 KiB: no attribute query per call
  int dev = 0, limit = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  if (need > (size_t)limit)
    throw std::invalid_argument(shape + ": the custom kernels need " + std::to_string(need / 1024) +
                                " KiB of shared memory per block, this GPU allows " + std::to_string(limit / 1024) +
                                " KiB (use --attention cudnn)");
}

template <typename Kernel>
void set_smem(Kernel k, size_t bytes) {
  if (bytes > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

// dst[j][dh + 1] = row j of src (row stride m.ld) widened to fp32 for j < T, zero for T <= j < Tpad.
template <typename TE>
__device__ __forceinline__ void load_rows_padded(float* dst, const TE* src, const Dims& m) {
  for (int idx = threadIdx.x; idx < m.Tpad * m.dh; idx += blockDim.x) {
    const int j = idx / m.dh, d = idx % m.dh;
    dst[j * (m.dh + 1) + d] = j < m.T ? to_f32(src[(size_t)j * m.ld + d]) : 0.0f;
  }
}

// One warp's share of a row times a matrix in shared memory (dot_rows, weighted_rows, store_row).
// Lane l owns key slots l + 32k (k < m.jpl) and head-dim slots l + 32c (c < m.dpl, l + 32c < dh).

// s[k] = sum_{d < dh} x[d] M[(lane + 32k) ldm + d]: the row x against rows of M (zero-padded to Tpad).
__device__ __forceinline__ void dot_rows(const float* x, const float* M, int ldm, const Dims& m, int lane,
                                         float (&s)[kMaxJ]) {
#pragma unroll
  for (int k = 0; k < kMaxJ; ++k) s[k] = 0.0f;
  for (int d = 0; d < m.dh; ++d) {
    const float xd = x[d];
#pragma unroll
    for (int k = 0; k < kMaxJ; ++k)
      if (k < m.jpl) s[k] = fmaf(xd, M[(lane + 32 * k) * ldm + d], s[k]);
  }
}

// o[c] = sum_{j < n} w[j] M[j ldm + lane + 32c]: the weights w times n rows of M.
__device__ __forceinline__ void weighted_rows(const float* w, const float* M, int ldm, int n, const Dims& m,
                                              int lane, float (&o)[kMaxD]) {
#pragma unroll
  for (int c = 0; c < kMaxD; ++c) o[c] = 0.0f;
  for (int j = 0; j < n; ++j) {
    const float wj = w[j];
#pragma unroll
    for (int c = 0; c < kMaxD; ++c) {
      const int d = lane + 32 * c;
      if (c < m.dpl && d < m.dh) o[c] = fmaf(wj, M[j * ldm + d], o[c]);
    }
  }
}

// dst[lane + 32c] = scale * o[c], rounded to TE.
template <typename TE>
__device__ __forceinline__ void store_row(TE* dst, const float (&o)[kMaxD], float scale, const Dims& m, int lane) {
#pragma unroll
  for (int c = 0; c < kMaxD; ++c) {
    const int d = lane + 32 * c;
    if (c < m.dpl && d < m.dh) dst[d] = from_f32<TE>(o[c] * scale);
  }
}

// grid (ceil(T/kTile), H, B). smem: K [Tpad][dh+1] (zero rows past T), V [T][dh], Q tile
// [kTile][dh], per-warp probability row [kWarps][Tpad].
template <typename TE>
__global__ void attn_fwd_kernel(const TE* __restrict__ qkv, float* __restrict__ probs,
                                TE* __restrict__ out, Dims m) {
  extern __shared__ float smem[];
  const int dh = m.dh, T = m.T;
  float* Ks = smem;
  float* Vs = Ks + (size_t)m.Tpad * (dh + 1);
  float* Qs = Vs + (size_t)T * dh;
  float* Ps = Qs + (size_t)kTile * dh;
  const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * kTile;
  const int q1 = min(T, q0 + kTile);
  const TE* base = qkv + (size_t)b * T * m.ld + h * dh;
  load_rows_padded(Ks, base + m.D, m);
  for (int idx = threadIdx.x; idx < T * dh; idx += blockDim.x) {
    const int j = idx / dh, d = idx % dh;
    Vs[idx] = to_f32(base[(size_t)j * m.ld + 2 * m.D + d]);
  }
  for (int idx = threadIdx.x; idx < (q1 - q0) * dh; idx += blockDim.x) {
    const int r = idx / dh, d = idx % dh;
    Qs[idx] = to_f32(base[(size_t)(q0 + r) * m.ld + d]);
  }
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float* prow = Ps + warp * m.Tpad;
  for (int r = q0 + warp; r < q1; r += kWarps) {
    float s[kMaxJ];
    dot_rows(Qs + (r - q0) * dh, Ks, dh + 1, m, lane, s);
    float mx = -INFINITY;
#pragma unroll
    for (int k = 0; k < kMaxJ; ++k) {
      s[k] *= m.scale;
      if (k < m.jpl && lane + 32 * k < T) mx = fmaxf(mx, s[k]);
    }
    mx = warp_max(mx);
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < kMaxJ; ++k) {
      const bool valid = k < m.jpl && lane + 32 * k < T;
      s[k] = valid ? expf(s[k] - mx) : 0.0f;
      sum += s[k];
    }
    sum = warp_sum(sum);
    float* prow_g = probs + (((size_t)b * m.H + h) * T + r) * T;
#pragma unroll
    for (int k = 0; k < kMaxJ; ++k) {
      const int j = lane + 32 * k;
      if (k < m.jpl) {
        const float p = s[k] / sum;
        prow[j] = p;  // zero for j >= T
        if (j < T) prow_g[j] = p;
      }
    }
    __syncwarp();
    float o[kMaxD];
    weighted_rows(prow, Vs, dh, T, m, lane, o);
    store_row(out + ((size_t)b * T + r) * m.D + h * dh, o, 1.0f, m, lane);
    __syncwarp();
  }
}

// Backward A, per query tile: ds rows (to global scratch) and dq.
// smem: K [Tpad][dh+1], V [Tpad][dh+1] (zero rows past T), dO tile [kTile][dh], ds rows
// [kWarps][Tpad].
template <typename TE>
__global__ void attn_bwd_query_kernel(const TE* __restrict__ qkv, const float* __restrict__ probs,
                                      const TE* __restrict__ dout, TE* __restrict__ dqkv,
                                      float* __restrict__ dscores, Dims m) {
  extern __shared__ float smem[];
  const int dh = m.dh, T = m.T;
  float* Ks = smem;
  float* Vs = Ks + (size_t)m.Tpad * (dh + 1);
  float* dOs = Vs + (size_t)m.Tpad * (dh + 1);
  float* dSs = dOs + (size_t)kTile * dh;
  const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * kTile;
  const int q1 = min(T, q0 + kTile);
  const TE* base = qkv + (size_t)b * T * m.ld + h * dh;
  load_rows_padded(Ks, base + m.D, m);
  load_rows_padded(Vs, base + 2 * m.D, m);
  for (int idx = threadIdx.x; idx < (q1 - q0) * dh; idx += blockDim.x) {
    const int r = idx / dh, d = idx % dh;
    dOs[idx] = to_f32(dout[((size_t)b * T + q0 + r) * m.D + h * dh + d]);
  }
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float* dsrow = dSs + warp * m.Tpad;
  for (int r = q0 + warp; r < q1; r += kWarps) {
    float dp[kMaxJ];
    dot_rows(dOs + (r - q0) * dh, Vs, dh + 1, m, lane, dp);
    const size_t prow = (((size_t)b * m.H + h) * T + r) * T;
    float p[kMaxJ];
    float delta = 0.0f;
#pragma unroll
    for (int k = 0; k < kMaxJ; ++k) {
      const int j = lane + 32 * k;
      p[k] = (k < m.jpl && j < T) ? probs[prow + j] : 0.0f;
      delta = fmaf(p[k], dp[k], delta);
    }
    delta = warp_sum(delta);
#pragma unroll
    for (int k = 0; k < kMaxJ; ++k) {
      const int j = lane + 32 * k;
      if (k < m.jpl) {
        const float ds = p[k] * (dp[k] - delta);
        dsrow[j] = ds;  // zero for j >= T
        if (j < T) dscores[prow + j] = ds;
      }
    }
    __syncwarp();
    float dq[kMaxD];
    weighted_rows(dsrow, Ks, dh + 1, T, m, lane, dq);
    store_row(dqkv + ((size_t)b * T + r) * m.ld + h * dh, dq, m.scale, m, lane);
    __syncwarp();
  }
}

// Backward B, per key tile: dk_j = scale * sum_i ds_ij q_i, dv_j = sum_i p_ij do_i.
// smem: Q [T][dh], dO [T][dh], per-warp columns of p and ds [kWarps][2][T].
template <typename TE>
__global__ void attn_bwd_key_kernel(const TE* __restrict__ qkv, const float* __restrict__ probs,
                                    const TE* __restrict__ dout,
                                    const float* __restrict__ dscores, TE* __restrict__ dqkv,
                                    Dims m) {
  extern __shared__ float smem[];
  const int dh = m.dh, T = m.T;
  float* Qs = smem;
  float* dOs = Qs + (size_t)T * dh;
  float* cols = dOs + (size_t)T * dh;
  const int b = blockIdx.z, h = blockIdx.y, k0 = blockIdx.x * kTile;
  const int k1 = min(T, k0 + kTile);
  const TE* base = qkv + (size_t)b * T * m.ld + h * dh;
  for (int idx = threadIdx.x; idx < T * dh; idx += blockDim.x) {
    const int i = idx / dh, d = idx % dh;
    Qs[idx] = to_f32(base[(size_t)i * m.ld + d]);
    dOs[idx] = to_f32(dout[((size_t)b * T + i) * m.D + h * dh + d]);
  }
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float* pcol = cols + (size_t)warp * 2 * T;
  float* dscol = pcol + T;
  const size_t bh = ((size_t)b * m.H + h) * T * T;
  for (int j = k0 + warp; j < k1; j += kWarps) {
    for (int i = lane; i < T; i += 32) {
      pcol[i] = probs[bh + (size_t)i * T + j];
      dscol[i] = dscores[bh + (size_t)i * T + j];
    }
    __syncwarp();
    float dk[kMaxD], dv[kMaxD];
    weighted_rows(pcol, dOs, dh, T, m, lane, dv);
    weighted_rows(dscol, Qs, dh, T, m, lane, dk);
    TE* row = dqkv + ((size_t)b * T + j) * m.ld + h * dh;
    store_row(row + m.D, dk, m.scale, m, lane);
    store_row(row + 2 * m.D, dv, 1.0f, m, lane);
    __syncwarp();
  }
}

// ---- Small-sequence path (T <= 64, dh <= 64: the /32 ViTs): one block of 256 threads per
// (batch, head), everything in shared memory, each thread owning a 4x4 register tile of every
// T x T or T x dh product (rows ty + 16a, columns tx + 16b). Row indices past T are clamped for
// loads and skipped for stores. Shared arrays are [T][kLd].
constexpr int kSmallThreads = 256;
constexpr int kLd = 65;

// Copies the [T, dh] slice (row stride ld) at src into dst[T][kLd], widened to fp32.
template <typename T>
__device__ __forceinline__ void load_tile(float* dst, const T* src, size_t ld, int rows, int dh) {
  for (int idx = threadIdx.x; idx < rows * dh; idx += kSmallThreads) {
    const int t = idx / dh, d = idx % dh;
    dst[t * kLd + d] = to_f32(src[(size_t)t * ld + d]);
  }
}

// acc[a][c] += sum_{k < n} x(k, a) y(k, c), a, c < 4: this thread's 4x4 register tile of a product
// whose operands the caller reads from shared memory (x(k, a): row ty + 16a, y(k, c): column
// tx + 16c, both clamped by the caller).
template <typename X, typename Y>
__device__ __forceinline__ void tile_step(float (&acc)[4][4], int k, X x, Y y) {
  float xa[4], yc[4];
#pragma unroll
  for (int a = 0; a < 4; ++a) {
    xa[a] = x(k, a);
    yc[a] = y(k, a);
  }
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[a][c] = fmaf(xa[a], yc[c], acc[a][c]);
}

template <typename X, typename Y>
__device__ __forceinline__ void tile_fma(float (&acc)[4][4], int n, X x, Y y) {
  for (int k = 0; k < n; ++k) tile_step(acc, k, x, y);
}

// Two tile_fma products over the same k in one loop (half the loop overhead of two loops).
template <typename X1, typename Y1, typename X2, typename Y2>
__device__ __forceinline__ void tile_fma2(float (&acc1)[4][4], float (&acc2)[4][4], int n, X1 x1, Y1 y1, X2 x2,
                                          Y2 y2) {
  for (int k = 0; k < n; ++k) {
    tile_step(acc1, k, x1, y1);
    tile_step(acc2, k, x2, y2);
  }
}

// store(i, j, acc[a][c]) for row i = ty + 16a < rows and column j = tx + 16c < cols.
template <typename S>
__device__ __forceinline__ void tile_store(const float (&acc)[4][4], int rows, int cols, S store) {
  const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
#pragma unroll
  for (int a = 0; a < 4; ++a) {
    const int i = ty + 16 * a;
    if (i >= rows) continue;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int j = tx + 16 * c;
      if (j < cols) store(i, j, acc[a][c]);
    }
  }
}

template <typename TE>
__global__ void __launch_bounds__(kSmallThreads)
attn_fwd_small_kernel(const TE* __restrict__ qkv, float* __restrict__ probs,
                      TE* __restrict__ out, Dims m) {
  extern __shared__ float smem[];
  const int T = m.T, dh = m.dh;
  float* Qs = smem;  // later reused for P
  float* Ks = Qs + T * kLd;
  float* Vs = Ks + T * kLd;
  float* Ps = Qs;
  const int b = blockIdx.y, h = blockIdx.x;
  const TE* base = qkv + (size_t)b * T * m.ld + h * dh;
  load_tile(Qs, base, m.ld, T, dh);
  load_tile(Ks, base + m.D, m.ld, T, dh);
  load_tile(Vs, base + 2 * m.D, m.ld, T, dh);
  __syncthreads();
  const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
  int ri[4], cj[4];
#pragma unroll
  for (int a = 0; a < 4; ++a) {
    ri[a] = min(ty + 16 * a, T - 1);
    cj[a] = min(tx + 16 * a, T - 1);
  }
  float acc[4][4] = {};
  tile_fma(acc, dh, [&](int d, int a) { return Qs[ri[a] * kLd + d]; }, [&](int d, int c) { return Ks[cj[c] * kLd + d]; });
  __syncthreads();  // Q is dead: its space becomes P
  // Written out, not by tile_store: with it ptxas gives this kernel 63 registers instead of 48
  // (4 blocks per SM instead of 5).
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int i = ty + 16 * a, j = tx + 16 * c;
      if (i < T && j < T) Ps[i * kLd + j] = acc[a][c] * m.scale;
    }
  __syncthreads();
  // Row softmax, one warp per row, two key slots per lane.
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float* pg = probs + ((size_t)b * m.H + h) * T * T;
  for (int i = warp; i < T; i += kSmallThreads / 32) {
    const bool v0 = lane < T, v1 = lane + 32 < T;
    const float s0 = v0 ? Ps[i * kLd + lane] : -INFINITY;
    const float s1 = v1 ? Ps[i * kLd + lane + 32] : -INFINITY;
    const float mx = warp_max(fmaxf(s0, s1));
    const float e0 = v0 ? expf(s0 - mx) : 0.0f, e1 = v1 ? expf(s1 - mx) : 0.0f;
    const float sum = warp_sum(e0 + e1);
    if (v0) {
      const float p = e0 / sum;
      Ps[i * kLd + lane] = p;
      pg[(size_t)i * T + lane] = p;
    }
    if (v1) {
      const float p = e1 / sum;
      Ps[i * kLd + lane + 32] = p;
      pg[(size_t)i * T + lane + 32] = p;
    }
  }
  __syncthreads();
  // O = P V.
  float o[4][4] = {};
  int dc[4];
#pragma unroll
  for (int c = 0; c < 4; ++c) dc[c] = min(tx + 16 * c, dh - 1);
  tile_fma(o, T, [&](int j, int a) { return Ps[ri[a] * kLd + j]; }, [&](int j, int c) { return Vs[j * kLd + dc[c]]; });
  TE* obase = out + (size_t)b * T * m.D + h * dh;
  tile_store(o, T, dh, [&](int i, int d, float v) { obase[(size_t)i * m.D + d] = from_f32<TE>(v); });
}

// Backward, one block per (batch, head), three [T][kLd] arrays:
//  A: P, dO, V loaded; dV = P^T dO (stored); dP = dO V^T (registers).
//  B: dP -> V's space; dS = P (dP - rowsum(P dP)) in place.
//  C: Q -> dO's space, K -> P's space; dQ = dS K * scale, dK = dS^T Q * scale (stored).
template <typename TE>
__global__ void __launch_bounds__(kSmallThreads)
attn_bwd_small_kernel(const TE* __restrict__ qkv, const float* __restrict__ probs,
                      const TE* __restrict__ dout, TE* __restrict__ dqkv, Dims m) {
  extern __shared__ float smem[];
  const int T = m.T, dh = m.dh;
  float* Ps = smem;          // P, later K
  float* dOs = Ps + T * kLd;  // dO, later Q
  float* Vs = dOs + T * kLd;  // V, later dP / dS
  const int b = blockIdx.y, h = blockIdx.x;
  const TE* base = qkv + (size_t)b * T * m.ld + h * dh;
  const float* pg = probs + ((size_t)b * m.H + h) * T * T;
  load_tile(Ps, pg, T, T, T);
  load_tile(dOs, dout + (size_t)b * T * m.D + h * dh, m.D, T, dh);
  load_tile(Vs, base + 2 * m.D, m.ld, T, dh);
  __syncthreads();
  const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
  int r[4], cT[4], cD[4];
#pragma unroll
  for (int a = 0; a < 4; ++a) {
    r[a] = min(ty + 16 * a, T - 1);
    cT[a] = min(tx + 16 * a, T - 1);
    cD[a] = min(tx + 16 * a, dh - 1);
  }
  TE* row_base = dqkv + (size_t)b * T * m.ld + h * dh;
  {
    // dV[j][d] = sum_i P[i][j] dO[i][d]; rows j = ty + 16a, columns d = tx + 16c.
    float acc[4][4] = {};
    tile_fma(acc, T, [&](int i, int a) { return Ps[i * kLd + r[a]]; }, [&](int i, int c) { return dOs[i * kLd + cD[c]]; });
    tile_store(acc, T, dh, [&](int j, int d, float v) { row_base[(size_t)j * m.ld + 2 * m.D + d] = from_f32<TE>(v); });
  }
  float dp[4][4] = {};
  // dP[i][j] = sum_d dO[i][d] V[j][d]; rows i = ty + 16a, columns j = tx + 16c.
  tile_fma(dp, dh, [&](int d, int a) { return dOs[r[a] * kLd + d]; }, [&](int d, int c) { return Vs[cT[c] * kLd + d]; });
  __syncthreads();  // V and dO are dead
  float* dSs = Vs;
  tile_store(dp, T, T, [&](int i, int j, float v) { dSs[i * kLd + j] = v; });
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int i = warp; i < T; i += kSmallThreads / 32) {
    const bool v0 = lane < T, v1 = lane + 32 < T;
    const float p0 = v0 ? Ps[i * kLd + lane] : 0.0f, p1 = v1 ? Ps[i * kLd + lane + 32] : 0.0f;
    const float g0 = v0 ? dSs[i * kLd + lane] : 0.0f, g1 = v1 ? dSs[i * kLd + lane + 32] : 0.0f;
    const float delta = warp_sum(fmaf(p0, g0, p1 * g1));
    if (v0) dSs[i * kLd + lane] = p0 * (g0 - delta);
    if (v1) dSs[i * kLd + lane + 32] = p1 * (g1 - delta);
  }
  __syncthreads();  // P is dead
  float* Ks = Ps;
  float* Qs = dOs;
  load_tile(Ks, base + m.D, m.ld, T, dh);
  load_tile(Qs, base, m.ld, T, dh);
  __syncthreads();
  // dQ[i][d] = sum_t dS[i][t] K[t][d]; dK[j][d] = sum_t dS[t][j] Q[t][d].
  float dq[4][4] = {}, dk[4][4] = {};
  tile_fma2(
      dq, dk, T, [&](int t, int a) { return dSs[r[a] * kLd + t]; }, [&](int t, int c) { return Ks[t * kLd + cD[c]]; },
      [&](int t, int a) { return dSs[t * kLd + r[a]]; }, [&](int t, int c) { return Qs[t * kLd + cD[c]]; });
  tile_store(dq, T, dh, [&](int i, int d, float v) { row_base[(size_t)i * m.ld + d] = from_f32<TE>(v * m.scale); });
  tile_store(dk, T, dh, [&](int i, int d, float v) { row_base[(size_t)i * m.ld + m.D + d] = from_f32<TE>(v * m.scale); });
}

bool use_small(int T, int dh) { return T <= 64 && dh <= 64; }

// The fp32 overloads' precision: true for tf32 (tensor cores), false for fp32; bf16 is refused.
bool fp32_storage_tf32(const char* what, Precision p) {
  if (p == Precision::bf16)
    throw std::invalid_argument(std::string(what) + ": fp32 buffers with precision bf16 (bf16 storage takes the bf16 overload)");
  return p == Precision::tf32;
}

// The tensor-core kernels for this call (attention_saves_stats), with their alignment checked.
bool take_mma(const char* what, int T, int head_dim, Precision p, const void* qkv, const void* out_or_dout,
              const void* dqkv, const void* probs) {
  if (!attention_saves_stats(T, head_dim, p)) return false;
  if (!attention_mma_fits(T, head_dim, qkv, out_or_dout, dqkv) || reinterpret_cast<uintptr_t>(probs) % 8 != 0)
    throw std::invalid_argument(std::string(what) + ": T <= 64 with head_dim 64 runs the tensor-core kernels, which need "
                                "16-byte aligned activations and an 8-byte aligned statistics buffer");
  return true;
}

/// The Precision of a call on TE storage: bf16, or fp32 storage with (tf32) or without TF32 tensor cores.
template <typename TE>
Precision call_precision(bool tf32_cores) {
  if constexpr (std::is_same_v<TE, __nv_bfloat16>) return Precision::bf16;
  else return tf32_cores ? Precision::tf32 : Precision::fp32;
}

template <typename TE>
void forward_impl(const TE* qkv, float* probs, TE* out, int batch, int T_, int heads, int head_dim,
                  cudaStream_t stream, bool tf32_cores = false) {
  const int T = T_;
  check(batch, T, heads, head_dim, "attention_forward");
  const Precision p = call_precision<TE>(tf32_cores);
  if (take_mma("attention_forward", T, head_dim, p, qkv, out, out, probs)) {
    if constexpr (std::is_same_v<TE, __nv_bfloat16>) return attention_forward_mma(qkv, probs, out, batch, T, heads, stream);
    else return attention_forward_mma_tf32(qkv, probs, out, batch, T, heads, stream);
  }
  const Dims m = make_dims(T, heads, head_dim);
  if (use_small(T, head_dim)) {
    const size_t smem = sizeof(float) * 3 * (size_t)T * kLd;
    set_smem(attn_fwd_small_kernel<TE>, smem);
    attn_fwd_small_kernel<TE><<<dim3(heads, batch), kSmallThreads, smem, stream>>>(qkv, probs, out, m);
    CUDA_CHECK_LAUNCH();
    return;
  }
  const size_t smem = fwd_smem(m);
  set_smem(attn_fwd_kernel<TE>, smem);
  const dim3 grid((T + kTile - 1) / kTile, heads, batch);
  attn_fwd_kernel<TE><<<grid, kWarps * 32, smem, stream>>>(qkv, probs, out, m);
  CUDA_CHECK_LAUNCH();
}

template <typename TE>
void backward_impl(const TE* qkv, const float* probs, const TE* dout, TE* dqkv, float* scratch, int batch, int T_,
                   int heads, int head_dim, cudaStream_t stream, bool tf32_cores, float* dqkv_colsum) {
  const int T = T_;
  check(batch, T, heads, head_dim, "attention_backward");
  const Precision p = call_precision<TE>(tf32_cores);
  if (take_mma("attention_backward", T, head_dim, p, qkv, dout, dqkv, probs)) {
    if constexpr (std::is_same_v<TE, __nv_bfloat16>)
      return attention_backward_mma(qkv, probs, dout, dqkv, batch, T, heads, stream, dqkv_colsum);
    else
      return attention_backward_mma_tf32(qkv, probs, dout, dqkv, batch, T, heads, stream, dqkv_colsum);
  }
  if (dqkv_colsum)
    throw std::invalid_argument(
        "attention_backward: dqkv_colsum needs the tensor-core kernels (attention_saves_stats: "
        "T <= 64, head_dim 64, bf16 or tf32)");
  const Dims m = make_dims(T, heads, head_dim);
  if (use_small(T, head_dim)) {
    const size_t smem = sizeof(float) * 3 * (size_t)T * kLd;
    set_smem(attn_bwd_small_kernel<TE>, smem);
    attn_bwd_small_kernel<TE><<<dim3(heads, batch), kSmallThreads, smem, stream>>>(qkv, probs, dout,
                                                                                  dqkv, m);
    CUDA_CHECK_LAUNCH();
    return;
  }
  const dim3 grid((T + kTile - 1) / kTile, heads, batch);
  const size_t smem_a = bwd_query_smem(m);
  set_smem(attn_bwd_query_kernel<TE>, smem_a);
  attn_bwd_query_kernel<TE><<<grid, kWarps * 32, smem_a, stream>>>(qkv, probs, dout, dqkv, scratch, m);
  CUDA_CHECK_LAUNCH();
  const size_t smem_b = bwd_key_smem(m);
  set_smem(attn_bwd_key_kernel<TE>, smem_b);
  attn_bwd_key_kernel<TE><<<grid, kWarps * 32, smem_b, stream>>>(qkv, probs, dout, scratch, dqkv, m);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void attention_forward(const float* qkv, float* probs, float* out, int batch, int T, int heads,
                       int head_dim, cudaStream_t stream, Precision precision) {
  forward_impl(qkv, probs, out, batch, T, heads, head_dim, stream, fp32_storage_tf32("attention_forward", precision));
}

void attention_forward(const __nv_bfloat16* qkv, float* probs, __nv_bfloat16* out, int batch,
                       int T, int heads, int head_dim, cudaStream_t stream) {
  forward_impl(qkv, probs, out, batch, T, heads, head_dim, stream);
}

bool attention_saves_stats(int T, int head_dim, Precision precision) {
  return precision != Precision::fp32 && attention_mma_shape(T, head_dim);
}

size_t attention_saved_floats(int batch, int T, int heads, int head_dim, Precision precision) {
  return attention_saves_stats(T, head_dim, precision) ? attention_mma_stats_floats(batch, T, heads)
                                                       : (size_t)batch * heads * T * T;
}

size_t attention_backward_scratch_floats(int batch, int T, int heads, int head_dim) {
  return use_small(T, head_dim) ? 0 : (size_t)batch * heads * T * T;  // the T > 64 or head_dim > 64 kernels'
}

void attention_backward(const float* qkv, const float* probs, const float* dout, float* dqkv, float* scratch, int batch,
                        int T, int heads, int head_dim, cudaStream_t stream, Precision precision, float* dqkv_colsum) {
  backward_impl(qkv, probs, dout, dqkv, scratch, batch, T, heads, head_dim, stream,
                fp32_storage_tf32("attention_backward", precision), dqkv_colsum);
}

void attention_backward(const __nv_bfloat16* qkv, const float* probs, const __nv_bfloat16* dout, __nv_bfloat16* dqkv,
                        float* scratch, int batch, int T, int heads, int head_dim, cudaStream_t stream,
                        float* dqkv_colsum) {
  backward_impl(qkv, probs, dout, dqkv, scratch, batch, T, heads, head_dim, stream, false, dqkv_colsum);
}

}  // namespace vitddp
