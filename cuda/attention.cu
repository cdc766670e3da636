#include "cuda/attention.h"

#include <stdexcept>
#include <string>

#include "cuda/block_reduce.cuh"
#include "cuda/check.h"

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
__global__ void attn_fwd_kernel(const float* __restrict__ qkv, float* __restrict__ probs,
                                float* __restrict__ out, Dims m) {
  extern __shared__ float smem[];
  const int dh = m.dh, T = m.T;
  float* Ks = smem;
  float* Vs = Ks + (size_t)m.Tpad * (dh + 1);
  float* Qs = Vs + (size_t)T * dh;
  float* Ps = Qs + (size_t)kTile * dh;
  const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * kTile;
  const int q1 = min(T, q0 + kTile);
  const float* base = qkv + (size_t)b * T * m.ld + h * dh;
  for (int idx = threadIdx.x; idx < m.Tpad * dh; idx += blockDim.x) {
    const int j = idx / dh, d = idx % dh;
    const bool in = j < T;
    Ks[j * (dh + 1) + d] = in ? base[(size_t)j * m.ld + m.D + d] : 0.0f;
    if (in) Vs[j * dh + d] = base[(size_t)j * m.ld + 2 * m.D + d];
  }
  for (int idx = threadIdx.x; idx < (q1 - q0) * dh; idx += blockDim.x) {
    const int r = idx / dh, d = idx % dh;
    Qs[idx] = base[(size_t)(q0 + r) * m.ld + d];
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
    float* orow = out + ((size_t)b * T + r) * m.D + h * dh;
#pragma unroll
    for (int c = 0; c < kMaxD; ++c) {
      const int d = lane + 32 * c;
      if (c < m.dpl && d < dh) orow[d] = o[c];
    }
    __syncwarp();
  }
}

// Backward A, per query tile: ds rows (to global scratch) and dq.
// smem: K [Tpad][dh+1], V [Tpad][dh+1] (zero rows past T), dO tile [kTile][dh], ds rows
// [kWarps][Tpad].
__global__ void attn_bwd_query_kernel(const float* __restrict__ qkv, const float* __restrict__ probs,
                                      const float* __restrict__ dout, float* __restrict__ dqkv,
                                      float* __restrict__ dscores, Dims m) {
  extern __shared__ float smem[];
  const int dh = m.dh, T = m.T;
  float* Ks = smem;
  float* Vs = Ks + (size_t)m.Tpad * (dh + 1);
  float* dOs = Vs + (size_t)m.Tpad * (dh + 1);
  float* dSs = dOs + (size_t)kTile * dh;
  const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * kTile;
  const int q1 = min(T, q0 + kTile);
  const float* base = qkv + (size_t)b * T * m.ld + h * dh;
  for (int idx = threadIdx.x; idx < m.Tpad * dh; idx += blockDim.x) {
    const int j = idx / dh, d = idx % dh;
    const bool in = j < T;
    Ks[j * (dh + 1) + d] = in ? base[(size_t)j * m.ld + m.D + d] : 0.0f;
    Vs[j * (dh + 1) + d] = in ? base[(size_t)j * m.ld + 2 * m.D + d] : 0.0f;
  }
  for (int idx = threadIdx.x; idx < (q1 - q0) * dh; idx += blockDim.x) {
    const int r = idx / dh, d = idx % dh;
    dOs[idx] = dout[((size_t)b * T + q0 + r) * m.D + h * dh + d];
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
    float* dqrow = dqkv + ((size_t)b * T + r) * m.ld + h * dh;
#pragma unroll
    for (int c = 0; c < kMaxD; ++c) {
      const int d = lane + 32 * c;
      if (c < m.dpl && d < dh) dqrow[d] = dq[c] * m.scale;
    }
    __syncwarp();
  }
}

// Backward B, per key tile: dk_j = scale * sum_i ds_ij q_i, dv_j = sum_i p_ij do_i.
// smem: Q [T][dh], dO [T][dh], per-warp columns of p and ds [kWarps][2][T].
__global__ void attn_bwd_key_kernel(const float* __restrict__ qkv, const float* __restrict__ probs,
                                    const float* __restrict__ dout,
                                    const float* __restrict__ dscores, float* __restrict__ dqkv,
                                    Dims m) {
  extern __shared__ float smem[];
  const int dh = m.dh, T = m.T;
  float* Qs = smem;
  float* dOs = Qs + (size_t)T * dh;
  float* cols = dOs + (size_t)T * dh;
  const int b = blockIdx.z, h = blockIdx.y, k0 = blockIdx.x * kTile;
  const int k1 = min(T, k0 + kTile);
  const float* base = qkv + (size_t)b * T * m.ld + h * dh;
  for (int idx = threadIdx.x; idx < T * dh; idx += blockDim.x) {
    const int i = idx / dh, d = idx % dh;
    Qs[idx] = base[(size_t)i * m.ld + d];
    dOs[idx] = dout[((size_t)b * T + i) * m.D + h * dh + d];
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
    float* row = dqkv + ((size_t)b * T + j) * m.ld + h * dh;
#pragma unroll
    for (int c = 0; c < kMaxD; ++c) {
      const int d = lane + 32 * c;
      if (c < m.dpl && d < dh) {
        row[m.D + d] = dk[c] * m.scale;
        row[2 * m.D + d] = dv[c];
      }
    }
    __syncwarp();
  }
}

}  // namespace

void attention_forward(const float* qkv, float* probs, float* out, int batch, int T, int heads,
                       int head_dim, cudaStream_t stream) {
  check(batch, T, heads, head_dim, "attention_forward");
  const Dims m = make_dims(T, heads, head_dim);
  const size_t smem = sizeof(float) * ((size_t)m.Tpad * (m.dh + 1) + (size_t)T * m.dh +
                                       (size_t)kTile * m.dh + (size_t)kWarps * m.Tpad);
  set_smem(attn_fwd_kernel, smem);
  const dim3 grid((T + kTile - 1) / kTile, heads, batch);
  attn_fwd_kernel<<<grid, kWarps * 32, smem, stream>>>(qkv, probs, out, m);
  CUDA_CHECK_LAUNCH();
}

size_t attention_backward_scratch_floats(int batch, int T, int heads) {
  return (size_t)batch * heads * T * T;
}

void attention_backward(const float* qkv, const float* probs, const float* dout, float* dqkv,
                        float* scratch, int batch, int T, int heads, int head_dim,
                        cudaStream_t stream) {
  check(batch, T, heads, head_dim, "attention_backward");
  const Dims m = make_dims(T, heads, head_dim);
  const dim3 grid((T + kTile - 1) / kTile, heads, batch);
  const size_t smem_a = sizeof(float) * (2 * (size_t)m.Tpad * (m.dh + 1) + (size_t)kTile * m.dh +
                                         (size_t)kWarps * m.Tpad);
  set_smem(attn_bwd_query_kernel, smem_a);
  attn_bwd_query_kernel<<<grid, kWarps * 32, smem_a, stream>>>(qkv, probs, dout, dqkv, scratch, m);
  CUDA_CHECK_LAUNCH();
  const size_t smem_b = sizeof(float) * (2 * (size_t)T * m.dh + (size_t)kWarps * 2 * T);
  set_smem(attn_bwd_key_kernel, smem_b);
  attn_bwd_key_kernel<<<grid, kWarps * 32, smem_b, stream>>>(qkv, probs, dout, scratch, dqkv, m);
  CUDA_CHECK_LAUNCH();
}

}  // namespace vitddp
