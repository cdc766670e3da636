// LayerNorm kernels with one warp per row, for D = 128 x V (V <= 8: ViT-B's 768, ViT-L's 1024):
// lane l holds columns 4l + 128k (k < V) in registers, so the row statistics are warp shuffles
// (no block synchronisation) and every lane has V 16-byte (fp32) or 8-byte (bf16) accesses in
// flight per tensor. Included by layernorm.cu only; the arithmetic per element is that of its
// block-per-row kernels (same formulas, another order of the row sums' additions). ViT-L/32's
// 1600 x 1024 rows, fp32, H200 (bench_gpu_ops): forward 5.7 -> 5.1 us, backward 11.9 -> 10.4 us;
// the bf16 training step +1.0% (results/h200/kernels/ln-warp).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda/kernels/block_reduce.cuh"
#include "cuda/kernels/vec4.cuh"

namespace vitddp {
namespace ln_warp {

constexpr int kWarps = 4;  // warps (rows in flight) per block

/// Forward of rows [0, rows): y = (x - mean) * rstd * gamma + beta, mean/rstd saved per row.
template <int V, typename TY>
__global__ void __launch_bounds__(kWarps * 32)
    forward(const float* __restrict__ x, int ldx, const float* __restrict__ gamma, const float* __restrict__ beta,
            TY* __restrict__ y, int ldy, float* __restrict__ mean_out, float* __restrict__ rstd_out, int rows,
            float eps) {
  constexpr int D = 128 * V;
  const int row = blockIdx.x * kWarps + threadIdx.x / 32, c0 = 4 * (threadIdx.x & 31);
  if (row >= rows) return;  // the whole warp: no block synchronisation below
  F4 v[V];
  const float* xr = x + (size_t)row * ldx + c0;
#pragma unroll
  for (int k = 0; k < V; ++k) v[k] = load4(xr + 128 * k);
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < V; ++k) s += (v[k].v[0] + v[k].v[1]) + (v[k].v[2] + v[k].v[3]);
  const float mean = warp_sum(s) / D;
  float q = 0.0f;
#pragma unroll
  for (int k = 0; k < V; ++k)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float c = v[k].v[i] - mean;
      q = fmaf(c, c, q);
    }
  const float rstd = 1.0f / sqrtf(warp_sum(q) / D + eps);
  TY* yr = y + (size_t)row * ldy + c0;
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const F4 g = load4(gamma + c0 + 128 * k), b = load4(beta + c0 + 128 * k);
    F4 out;
#pragma unroll
    for (int i = 0; i < 4; ++i) out.v[i] = fmaf((v[k].v[i] - mean) * rstd, g.v[i], b.v[i]);
    store4(yr + 128 * k, out);
  }
  if ((threadIdx.x & 31) == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

/// Rows per block of `backward` for `rows` rows: a multiple of kWarps, about two blocks per SM of
/// an H100/H200 (132 SMs) once there are enough rows.
inline int backward_rows_per_block(int rows) { return kWarps * (1 + (rows - 1) / (kWarps * 264)); }

/// Backward of rows [r0, r0 + rows_per_block) of block b: warp w takes rows r0 + w, r0 + w + kWarps...
/// and writes dx (added to it when add_dx; its bf16 copy when dx_bf16); the block's column sums of
/// dy * xhat, dy and (when part_dsum) the final dx go to row b of part_dgamma / part_dbeta /
/// part_dsum, the warps' sums added in a fixed order through shared memory.
template <int V, typename TDY>
__global__ void __launch_bounds__(kWarps * 32)
    backward(const TDY* __restrict__ dy, int lddy, const float* __restrict__ x, int ldx,
             const float* __restrict__ mean, const float* __restrict__ rstd, const float* __restrict__ gamma,
             float* __restrict__ dx, int lddx, bool add_dx, __nv_bfloat16* __restrict__ dx_bf16,
             float* __restrict__ part_dgamma, float* __restrict__ part_dbeta, float* __restrict__ part_dsum,
             int rows, int rows_per_block) {
  constexpr int D = 128 * V;
  __shared__ float red[kWarps][D];
  const int warp = threadIdx.x / 32, c0 = 4 * (threadIdx.x & 31);
  const int r0 = blockIdx.x * rows_per_block, r1 = min(rows, r0 + rows_per_block);
  const F4 zero{{0.0f, 0.0f, 0.0f, 0.0f}};
  F4 pdg[V], pdb[V], pds[V];
#pragma unroll
  for (int k = 0; k < V; ++k) pdg[k] = pdb[k] = pds[k] = zero;
  for (int r = r0 + warp; r < r1; r += kWarps) {
    F4 cdy[V], cx[V], cdx[V];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      cdy[k] = load4(dy + (size_t)r * lddy + c0 + 128 * k);
      cx[k] = load4(x + (size_t)r * ldx + c0 + 128 * k);
      cdx[k] = add_dx ? load4(dx + (size_t)r * lddx + c0 + 128 * k) : zero;
    }
    const float mu = mean[r], rs = rstd[r];
    float a = 0.0f, b = 0.0f;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const F4 g = load4(gamma + c0 + 128 * k);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float xh = (cx[k].v[i] - mu) * rs, gy = g.v[i] * cdy[k].v[i];
        a += gy;
        b = fmaf(gy, xh, b);
        pdg[k].v[i] = fmaf(cdy[k].v[i], xh, pdg[k].v[i]);
        pdb[k].v[i] += cdy[k].v[i];
      }
    }
    const float ma = warp_sum(a) / D, mb = warp_sum(b) / D;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const F4 g = load4(gamma + c0 + 128 * k);
      F4 out;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float xh = (cx[k].v[i] - mu) * rs, gy = g.v[i] * cdy[k].v[i];
        out.v[i] = cdx[k].v[i] + rs * (gy - ma - xh * mb);
        pds[k].v[i] += out.v[i];
      }
      store4(dx + (size_t)r * lddx + c0 + 128 * k, out);
      if (dx_bf16) store4(dx_bf16 + (size_t)r * lddx + c0 + 128 * k, out);
    }
  }
  // Column sums of the block: each warp's partials into shared memory, then added in warp order.
  auto combine = [&](const F4 (&p)[V], float* out) {
#pragma unroll
    for (int k = 0; k < V; ++k)
#pragma unroll
      for (int i = 0; i < 4; ++i) red[warp][c0 + 128 * k + i] = p[k].v[i];
    __syncthreads();
    for (int c = threadIdx.x; c < D; c += kWarps * 32) {
      float t = red[0][c];
#pragma unroll
      for (int w = 1; w < kWarps; ++w) t += red[w][c];
      out[(size_t)blockIdx.x * D + c] = t;
    }
    __syncthreads();
  };
  combine(pdg, part_dgamma);
  combine(pdb, part_dbeta);
  if (part_dsum) combine(pds, part_dsum);
}

}  // namespace ln_warp
}  // namespace vitddp
