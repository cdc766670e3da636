#include "cuda/attention.h"

#include <stdexcept>
#include <string>

#include "cuda/block_reduce.cuh"
#include "cuda/check.h"
#include "cuda/dtype.cuh"

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

void check(int batch, int T, int heads, int dh, const char* what) {
  if (batch < 1 || T < 1 || T > 32 * kMaxJ || heads < 1 || dh < 1 || dh > 32 * kMaxD)
    throw std::invalid_argument(std::string(what) + ": unsupported shape B=" + std::to_string(batch) +
                                " T=" + std::to_string(T) + " heads=" + std::to_string(heads) +
                                " head_dim=" + std::to_string(dh) + " (need T <= 512, head_dim <= 128)");
}

template <typename Kernel>
void set_smem(Kernel k, size_t bytes) {
  if (bytes > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
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
  for (int idx = threadIdx.x; idx < m.Tpad * dh; idx += blockDim.x) {
    const int j = idx / dh, d = idx % dh;
    const bool in = j < T;
    Ks[j * (dh + 1) + d] = in ? to_f32(base[(size_t)j * m.ld + m.D + d]) : 0.0f;
    if (in) Vs[j * dh + d] = to_f32(base[(size_t)j * m.ld + 2 * m.D + d]);
  }
  for (int idx = threadIdx.x; idx < (q1 - q0) * dh; idx += blockDim.x) {
    const int r = idx / dh, d = idx % dh;
    Qs[idx] = to_f32(base[(size_t)(q0 + r) * m.ld + d]);
  }
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float* prow = Ps + warp * m.Tpad;
  for (int r = q0 + warp; r < q1; r += kWarps) {
    const float* q = Qs + (r - q0) * dh;
    float s[kMaxJ];
#pragma unroll
    for (int k = 0; k < kMaxJ; ++k) s[k] = 0.0f;
    for (int d = 0; d < dh; ++d) {
      const float qd = q[d];
#pragma unroll
      for (int k = 0; k < kMaxJ; ++k)
        if (k < m.jpl) s[k] = fmaf(qd, Ks[(lane + 32 * k) * (dh + 1) + d], s[k]);
    }
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
#pragma unroll
    for (int c = 0; c < kMaxD; ++c) o[c] = 0.0f;
    for (int j = 0; j < T; ++j) {
      const float p = prow[j];
#pragma unroll
      for (int c = 0; c < kMaxD; ++c) {
        const int d = lane + 32 * c;
        if (c < m.dpl && d < dh) o[c] = fmaf(p, Vs[j * dh + d], o[c]);
      }
    }
    TE* orow = out + ((size_t)b * T + r) * m.D + h * dh;
#pragma unroll
    for (int c = 0; c < kMaxD; ++c) {
      const int d = lane + 32 * c;
      if (c < m.dpl && d < dh) orow[d] = from_f32<TE>(o[c]);
    }
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
  for (int idx = threadIdx.x; idx < m.Tpad * dh; idx += blockDim.x) {
    const int j = idx / dh, d = idx % dh;
    const bool in = j < T;
    Ks[j * (dh + 1) + d] = in ? to_f32(base[(size_t)j * m.ld + m.D + d]) : 0.0f;
    Vs[j * (dh + 1) + d] = in ? to_f32(base[(size_t)j * m.ld + 2 * m.D + d]) : 0.0f;
  }
  for (int idx = threadIdx.x; idx < (q1 - q0) * dh; idx += blockDim.x) {
    const int r = idx / dh, d = idx % dh;
    dOs[idx] = to_f32(dout[((size_t)b * T + q0 + r) * m.D + h * dh + d]);
  }
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float* dsrow = dSs + warp * m.Tpad;
  for (int r = q0 + warp; r < q1; r += kWarps) {
    const float* g = dOs + (r - q0) * dh;
    float dp[kMaxJ];
#pragma unroll
    for (int k = 0; k < kMaxJ; ++k) dp[k] = 0.0f;
    for (int d = 0; d < dh; ++d) {
      const float gd = g[d];
#pragma unroll
      for (int k = 0; k < kMaxJ; ++k)
        if (k < m.jpl) dp[k] = fmaf(gd, Vs[(lane + 32 * k) * (dh + 1) + d], dp[k]);
    }
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
#pragma unroll
    for (int c = 0; c < kMaxD; ++c) dq[c] = 0.0f;
    for (int j = 0; j < T; ++j) {
      const float ds = dsrow[j];
#pragma unroll
      for (int c = 0; c < kMaxD; ++c) {
        const int d = lane + 32 * c;
        if (c < m.dpl && d < dh) dq[c] = fmaf(ds, Ks[j * (dh + 1) + d], dq[c]);
      }
    }
    TE* dqrow = dqkv + ((size_t)b * T + r) * m.ld + h * dh;
#pragma unroll
    for (int c = 0; c < kMaxD; ++c) {
      const int d = lane + 32 * c;
      if (c < m.dpl && d < dh) dqrow[d] = from_f32<TE>(dq[c] * m.scale);
    }
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
#pragma unroll
    for (int c = 0; c < kMaxD; ++c) dk[c] = dv[c] = 0.0f;
    for (int i = 0; i < T; ++i) {
      const float p = pcol[i], ds = dscol[i];
#pragma unroll
      for (int c = 0; c < kMaxD; ++c) {
        const int d = lane + 32 * c;
        if (c < m.dpl && d < dh) {
          dv[c] = fmaf(p, dOs[i * dh + d], dv[c]);
          dk[c] = fmaf(ds, Qs[i * dh + d], dk[c]);
        }
      }
    }
    TE* row = dqkv + ((size_t)b * T + j) * m.ld + h * dh;
#pragma unroll
    for (int c = 0; c < kMaxD; ++c) {
      const int d = lane + 32 * c;
      if (c < m.dpl && d < dh) {
        row[m.D + d] = from_f32<TE>(dk[c] * m.scale);
        row[2 * m.D + d] = from_f32<TE>(dv[c]);
      }
    }
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
  for (int d = 0; d < dh; ++d) {
    float q[4], k[4];
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      q[a] = Qs[ri[a] * kLd + d];
      k[a] = Ks[cj[a] * kLd + d];
    }
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[a][c] = fmaf(q[a], k[c], acc[a][c]);
  }
  __syncthreads();  // Q is dead: its space becomes P
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
  for (int j = 0; j < T; ++j) {
    float p[4], v[4];
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      p[a] = Ps[ri[a] * kLd + j];
      v[a] = Vs[j * kLd + dc[a]];
    }
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int c = 0; c < 4; ++c) o[a][c] = fmaf(p[a], v[c], o[a][c]);
  }
#pragma unroll
  for (int a = 0; a < 4; ++a) {
    const int i = ty + 16 * a;
    if (i >= T) continue;
    TE* orow = out + ((size_t)b * T + i) * m.D + h * dh;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int d = tx + 16 * c;
      if (d < dh) orow[d] = from_f32<TE>(o[a][c]);
    }
  }
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
    for (int i = 0; i < T; ++i) {
      float p[4], g[4];
#pragma unroll
      for (int a = 0; a < 4; ++a) {
        p[a] = Ps[i * kLd + r[a]];
        g[a] = dOs[i * kLd + cD[a]];
      }
#pragma unroll
      for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[a][c] = fmaf(p[a], g[c], acc[a][c]);
    }
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      const int j = ty + 16 * a;
      if (j >= T) continue;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int d = tx + 16 * c;
        if (d < dh) row_base[(size_t)j * m.ld + 2 * m.D + d] = from_f32<TE>(acc[a][c]);
      }
    }
  }
  float dp[4][4] = {};
  // dP[i][j] = sum_d dO[i][d] V[j][d]; rows i = ty + 16a, columns j = tx + 16c.
  for (int d = 0; d < dh; ++d) {
    float g[4], v[4];
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      g[a] = dOs[r[a] * kLd + d];
      v[a] = Vs[cT[a] * kLd + d];
    }
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int c = 0; c < 4; ++c) dp[a][c] = fmaf(g[a], v[c], dp[a][c]);
  }
  __syncthreads();  // V and dO are dead
  float* dSs = Vs;
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int i = ty + 16 * a, j = tx + 16 * c;
      if (i < T && j < T) dSs[i * kLd + j] = dp[a][c];
    }
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
  for (int t = 0; t < T; ++t) {
    float si[4], sj[4], k[4], q[4];
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      si[a] = dSs[r[a] * kLd + t];
      sj[a] = dSs[t * kLd + r[a]];
      k[a] = Ks[t * kLd + cD[a]];
      q[a] = Qs[t * kLd + cD[a]];
    }
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        dq[a][c] = fmaf(si[a], k[c], dq[a][c]);
        dk[a][c] = fmaf(sj[a], q[c], dk[a][c]);
      }
  }
#pragma unroll
  for (int a = 0; a < 4; ++a) {
    const int i = ty + 16 * a;
    if (i >= T) continue;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int d = tx + 16 * c;
      if (d < dh) {
        row_base[(size_t)i * m.ld + d] = from_f32<TE>(dq[a][c] * m.scale);
        row_base[(size_t)i * m.ld + m.D + d] = from_f32<TE>(dk[a][c] * m.scale);
      }
    }
  }
}

bool use_small(int T, int dh) { return T <= 64 && dh <= 64; }

template <typename TE>
void forward_impl(const TE* qkv, float* probs, TE* out, int batch, int T_, int heads, int head_dim,
                  cudaStream_t stream) {
  const int T = T_;
  check(batch, T, heads, head_dim, "attention_forward");
  const Dims m = make_dims(T, heads, head_dim);
  if (use_small(T, head_dim)) {
    const size_t smem = sizeof(float) * 3 * (size_t)T * kLd;
    set_smem(attn_fwd_small_kernel<TE>, smem);
    attn_fwd_small_kernel<TE><<<dim3(heads, batch), kSmallThreads, smem, stream>>>(qkv, probs, out, m);
    CUDA_CHECK_LAUNCH();
    return;
  }
  const size_t smem = sizeof(float) * ((size_t)m.Tpad * (m.dh + 1) + (size_t)T * m.dh +
                                       (size_t)kTile * m.dh + (size_t)kWarps * m.Tpad);
  set_smem(attn_fwd_kernel<TE>, smem);
  const dim3 grid((T + kTile - 1) / kTile, heads, batch);
  attn_fwd_kernel<TE><<<grid, kWarps * 32, smem, stream>>>(qkv, probs, out, m);
  CUDA_CHECK_LAUNCH();
}

template <typename TE>
void backward_impl(const TE* qkv, const float* probs, const TE* dout, TE* dqkv, float* scratch,
                   int batch, int T_, int heads, int head_dim, cudaStream_t stream) {
  const int T = T_;
  check(batch, T, heads, head_dim, "attention_backward");
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
  const size_t smem_a = sizeof(float) * (2 * (size_t)m.Tpad * (m.dh + 1) + (size_t)kTile * m.dh +
                                         (size_t)kWarps * m.Tpad);
  set_smem(attn_bwd_query_kernel<TE>, smem_a);
  attn_bwd_query_kernel<TE><<<grid, kWarps * 32, smem_a, stream>>>(qkv, probs, dout, dqkv, scratch, m);
  CUDA_CHECK_LAUNCH();
  const size_t smem_b = sizeof(float) * (2 * (size_t)T * m.dh + (size_t)kWarps * 2 * T);
  set_smem(attn_bwd_key_kernel<TE>, smem_b);
  attn_bwd_key_kernel<TE><<<grid, kWarps * 32, smem_b, stream>>>(qkv, probs, dout, scratch, dqkv, m);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void attention_forward(const float* qkv, float* probs, float* out, int batch, int T, int heads,
                       int head_dim, cudaStream_t stream) {
  forward_impl(qkv, probs, out, batch, T, heads, head_dim, stream);
}

void attention_forward(const __nv_bfloat16* qkv, float* probs, __nv_bfloat16* out, int batch,
                       int T, int heads, int head_dim, cudaStream_t stream) {
  forward_impl(qkv, probs, out, batch, T, heads, head_dim, stream);
}

size_t attention_backward_scratch_floats(int batch, int T, int heads) {
  return (size_t)batch * heads * T * T;  // used by the T > 64 or head_dim > 64 path only
}

void attention_backward(const float* qkv, const float* probs, const float* dout, float* dqkv,
                        float* scratch, int batch, int T, int heads, int head_dim,
                        cudaStream_t stream) {
  backward_impl(qkv, probs, dout, dqkv, scratch, batch, T, heads, head_dim, stream);
}

void attention_backward(const __nv_bfloat16* qkv, const float* probs, const __nv_bfloat16* dout,
                        __nv_bfloat16* dqkv, float* scratch, int batch, int T, int heads,
                        int head_dim, cudaStream_t stream) {
  backward_impl(qkv, probs, dout, dqkv, scratch, batch, T, heads, head_dim, stream);
}

}  // namespace vitddp
