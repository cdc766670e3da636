#include "cuda/kernels/layernorm.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "cuda/kernels/block_reduce.cuh"
#include "cuda/check/check_cuda.h"
#include "cuda/kernels/dtype.cuh"
#include "cuda/kernels/layernorm_warp.cuh"
#include "cuda/kernels/reduce.h"
#include "cuda/kernels/vec4.cuh"

namespace vitddp {
namespace {

constexpr int kVpt = 4;  // values per thread: threads = ceil(D/4) rounded up to a warp

int ln_threads(int D) {
  const int t = ((D + kVpt - 1) / kVpt + 31) / 32 * 32;
  return std::min(1024, std::max(32, t));
}

// Rows handled by one backward block: about four blocks per SM of an H100/H200 (132 SMs), so
// enough loads are in flight (two per SM left the scalar kernel at a third of the memory
// bandwidth for ViT-L/32's 1600 x 1024 rows under ncu, 2026-11-30). Never more than
// kLnMaxBlocks blocks, nor more than `rows` (layernorm_backward_scratch_floats relies on it).
constexpr int kLnMaxBlocks = 528;
int ln_rows_per_block(int rows) { return std::max(1, (rows + kLnMaxBlocks - 1) / kLnMaxBlocks); }

void check_dims(int rows, int D, const char* what) {
  if (rows < 0 || D < 1 || D > 1024 * kVpt)
    throw std::invalid_argument(std::string(what) + ": unsupported rows=" + std::to_string(rows) +
                                " D=" + std::to_string(D) + " (need 1 <= D <= 4096)");
}

template <typename TY>
__global__ void ln_forward_kernel(const float* __restrict__ x, int ldx,
                                  const float* __restrict__ gamma, const float* __restrict__ beta,
                                  TY* __restrict__ y, int ldy, float* __restrict__ mean_out,
                                  float* __restrict__ rstd_out, int D, float eps) {
  __shared__ float scratch[32];
  const int row = blockIdx.x;
  const float* xr = x + (size_t)row * ldx;
  float v[kVpt];
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < kVpt; ++i) {
    const int d = threadIdx.x + i * blockDim.x;
    v[i] = d < D ? xr[d] : 0.0f;
    s += v[i];
  }
  const float mean = block_sum(s, scratch) / D;
  float q = 0.0f;
#pragma unroll
  for (int i = 0; i < kVpt; ++i) {
    const int d = threadIdx.x + i * blockDim.x;
    const float c = v[i] - mean;
    if (d < D) q = fmaf(c, c, q);
  }
  const float var = block_sum(q, scratch) / D;
  const float rstd = 1.0f / sqrtf(var + eps);
  TY* yr = y + (size_t)row * ldy;
#pragma unroll
  for (int i = 0; i < kVpt; ++i) {
    const int d = threadIdx.x + i * blockDim.x;
    if (d < D) yr[d] = from_f32<TY>(fmaf((v[i] - mean) * rstd, gamma[d], beta[d]));
  }
  if (threadIdx.x == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

// ln_forward_kernel with four contiguous columns per thread (16-byte / 8-byte accesses), for D,
// the leading dimensions and the pointers aligned to 4 elements (forward_impl checks).
template <typename TY>
__global__ void ln_forward_vec_kernel(const float* __restrict__ x, int ldx, const float* __restrict__ gamma,
                                      const float* __restrict__ beta, TY* __restrict__ y, int ldy,
                                      float* __restrict__ mean_out, float* __restrict__ rstd_out, int D, float eps) {
  __shared__ float scratch[32];
  const int row = blockIdx.x, d0 = 4 * threadIdx.x;
  const bool in_d = d0 < D;
  const F4 zero{{0.0f, 0.0f, 0.0f, 0.0f}};
  const F4 v = in_d ? load4(x + (size_t)row * ldx + d0) : zero;
  const float mean = block_sum(v.v[0] + v.v[1] + v.v[2] + v.v[3], scratch) / D;
  float q = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float c = v.v[i] - mean;
    if (in_d) q = fmaf(c, c, q);
  }
  const float var = block_sum(q, scratch) / D;
  const float rstd = 1.0f / sqrtf(var + eps);
  if (in_d) {
    const F4 g = load4(gamma + d0), b = load4(beta + d0);
    F4 out;
#pragma unroll
    for (int i = 0; i < 4; ++i) out.v[i] = fmaf((v.v[i] - mean) * rstd, g.v[i], b.v[i]);
    store4(y + (size_t)row * ldy + d0, out);
  }
  if (threadIdx.x == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

template <typename TDY>
__global__ void ln_backward_kernel(const TDY* __restrict__ dy, int lddy,
                                   const float* __restrict__ x, int ldx,
                                   const float* __restrict__ mean, const float* __restrict__ rstd,
                                   const float* __restrict__ gamma, float* __restrict__ dx,
                                   int lddx, bool add_dx, __nv_bfloat16* __restrict__ dx_bf16,
                                   float* __restrict__ part_dgamma,
                                   float* __restrict__ part_dbeta, int rows, int D,
                                   int rows_per_block) {
  __shared__ float scratch[64];
  const int r0 = blockIdx.x * rows_per_block;
  const int r1 = min(rows, r0 + rows_per_block);
  float g[kVpt], pdg[kVpt], pdb[kVpt];
#pragma unroll
  for (int i = 0; i < kVpt; ++i) {
    const int d = threadIdx.x + i * blockDim.x;
    g[i] = d < D ? gamma[d] : 0.0f;
    pdg[i] = 0.0f;
    pdb[i] = 0.0f;
  }
  const float inv_d = 1.0f / D;
  // Software pipelining: the next row's dy, x (and dx when adding) are loaded before this row's
  // block reduction, so the loads overlap the synchronisation.
  float ndy[kVpt], nx[kVpt], ndx[kVpt];
  auto load_row = [&](int r) {
#pragma unroll
    for (int i = 0; i < kVpt; ++i) {
      const int d = threadIdx.x + i * blockDim.x;
      const bool in = r < r1 && d < D;
      ndy[i] = in ? to_f32(dy[(size_t)r * lddy + d]) : 0.0f;
      nx[i] = in ? x[(size_t)r * ldx + d] : 0.0f;
      ndx[i] = in && add_dx ? dx[(size_t)r * lddx + d] : 0.0f;
    }
  };
  load_row(r0);
  for (int r = r0; r < r1; ++r) {
    float cdy[kVpt], cx[kVpt], cdx[kVpt];
#pragma unroll
    for (int i = 0; i < kVpt; ++i) {
      cdy[i] = ndy[i];
      cx[i] = nx[i];
      cdx[i] = ndx[i];
    }
    load_row(r + 1);
    const float mu = mean[r], rs = rstd[r];
    float xh[kVpt], gy[kVpt];
    float a = 0.0f, b = 0.0f;
#pragma unroll
    for (int i = 0; i < kVpt; ++i) {
      xh[i] = (cx[i] - mu) * rs;
      gy[i] = g[i] * cdy[i];
      a += gy[i];
      b = fmaf(gy[i], xh[i], b);
      pdg[i] = fmaf(cdy[i], xh[i], pdg[i]);
      pdb[i] += cdy[i];
    }
    const float2 ab = block_sum2(a, b, scratch);
    const float ma = ab.x * inv_d, mb = ab.y * inv_d;
    float* dxr = dx + (size_t)r * lddx;
#pragma unroll
    for (int i = 0; i < kVpt; ++i) {
      const int d = threadIdx.x + i * blockDim.x;
      if (d < D) {
        const float v = rs * (gy[i] - ma - xh[i] * mb);
        const float out = add_dx ? cdx[i] + v : v;
        dxr[d] = out;
        if (dx_bf16) dx_bf16[(size_t)r * lddx + d] = __float2bfloat16_rn(out);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kVpt; ++i) {
    const int d = threadIdx.x + i * blockDim.x;
    if (d < D) {
      part_dgamma[(size_t)blockIdx.x * D + d] = pdg[i];
      part_dbeta[(size_t)blockIdx.x * D + d] = pdb[i];
    }
  }
}

// Four contiguous columns per thread (thread t owns 4t..4t+3), so every load and store is one
// 16-byte (fp32) or 8-byte (bf16) access: four times the bytes in flight of ln_backward_kernel's
// one-element accesses. ViT-L/32's 1600 x 1024 rows, fp32 dy, H200 (bench_gpu_ops, 2026-11-30):
// 13.4 us -> 11.6 us, forward 6.5 us -> 5.7 us. The warp-per-row kernels of layernorm_warp.cuh
// took over D = 128 x V, V <= 8, at 10.4 us and 5.1 us (results/h200/kernels/ln-vec
// and ln-warp); these serve the other aligned widths. Same arithmetic per element; only
// the order of the row sums' additions differs. Needs D, the leading dimensions and the pointers
// aligned to 4 elements (backward_impl checks, and uses ln_backward_kernel otherwise).
template <typename TDY>
__global__ void ln_backward_vec_kernel(const TDY* __restrict__ dy, int lddy, const float* __restrict__ x, int ldx,
                                       const float* __restrict__ mean, const float* __restrict__ rstd,
                                       const float* __restrict__ gamma, float* __restrict__ dx, int lddx,
                                       bool add_dx, __nv_bfloat16* __restrict__ dx_bf16,
                                       float* __restrict__ part_dgamma, float* __restrict__ part_dbeta,
                                       float* __restrict__ part_dsum, int rows, int D, int rows_per_block) {
  __shared__ float scratch[64];
  const int r0 = blockIdx.x * rows_per_block;
  const int r1 = min(rows, r0 + rows_per_block);
  const int d0 = 4 * threadIdx.x;
  const bool in_d = d0 < D;
  const F4 zero{{0.0f, 0.0f, 0.0f, 0.0f}};
  const F4 g = in_d ? load4(gamma + d0) : zero;
  F4 pdg = zero, pdb = zero, pds = zero;
  const float inv_d = 1.0f / D;
  // The next row's dy, x (and dx when adding) are loaded before this row's block reduction.
  F4 ndy = zero, nx = zero, ndx = zero;
  auto load_row = [&](int r) {
    const bool in = r < r1 && in_d;
    ndy = in ? load4(dy + (size_t)r * lddy + d0) : zero;
    nx = in ? load4(x + (size_t)r * ldx + d0) : zero;
    ndx = in && add_dx ? load4(dx + (size_t)r * lddx + d0) : zero;
  };
  load_row(r0);
  for (int r = r0; r < r1; ++r) {
    const F4 cdy = ndy, cx = nx, cdx = ndx;
    load_row(r + 1);
    const float mu = mean[r], rs = rstd[r];
    F4 xh, gy;
    float a = 0.0f, b = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      xh.v[i] = (cx.v[i] - mu) * rs;
      gy.v[i] = g.v[i] * cdy.v[i];
      a += gy.v[i];
      b = fmaf(gy.v[i], xh.v[i], b);
      pdg.v[i] = fmaf(cdy.v[i], xh.v[i], pdg.v[i]);
      pdb.v[i] += cdy.v[i];
    }
    const float2 ab = block_sum2(a, b, scratch);
    const float ma = ab.x * inv_d, mb = ab.y * inv_d;
    if (in_d) {
      F4 out;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float v = rs * (gy.v[i] - ma - xh.v[i] * mb);
        out.v[i] = add_dx ? cdx.v[i] + v : v;
        pds.v[i] += out.v[i];
      }
      store4(dx + (size_t)r * lddx + d0, out);
      if (dx_bf16) store4(dx_bf16 + (size_t)r * lddx + d0, out);
    }
  }
  if (in_d) {
    store4(part_dgamma + (size_t)blockIdx.x * D + d0, pdg);
    store4(part_dbeta + (size_t)blockIdx.x * D + d0, pdb);
    if (part_dsum) store4(part_dsum + (size_t)blockIdx.x * D + d0, pds);
  }
}

// dgamma[d] (+)= sum over the backward blocks' partial sums: each block owns kPgCols columns and
// kPgRows threads per column walk the partial rows, then a fixed-order tree in shared memory
// (deterministic). 8 columns of fp32 are one 32-byte sector per row; 1024 / 8 = 128 blocks for
// ViT's D = 1024 (32 columns per block left 100 SMs idle: 10 us per call under ncu, 2026-11-30).
constexpr int kPgCols = 8, kPgRows = 128;

__global__ void ln_param_grad_kernel(const float* __restrict__ part_dgamma,
                                     const float* __restrict__ part_dbeta,
                                     const float* __restrict__ part_dsum, int nblocks, int D,
                                     float* __restrict__ dgamma, float* __restrict__ dbeta,
                                     float* __restrict__ dsum, bool accumulate) {
  __shared__ float sg[kPgRows][kPgCols + 1], sb[kPgRows][kPgCols + 1], ss[kPgRows][kPgCols + 1];
  const int d = blockIdx.x * kPgCols + threadIdx.x;
  const bool with_sum = part_dsum != nullptr;
  float ag = 0.0f, ab = 0.0f, as = 0.0f;
  if (d < D)
    for (int k = threadIdx.y; k < nblocks; k += kPgRows) {
      ag += part_dgamma[(size_t)k * D + d];
      ab += part_dbeta[(size_t)k * D + d];
      if (with_sum) as += part_dsum[(size_t)k * D + d];
    }
  sg[threadIdx.y][threadIdx.x] = ag;
  sb[threadIdx.y][threadIdx.x] = ab;
  ss[threadIdx.y][threadIdx.x] = as;
  __syncthreads();
#pragma unroll
  for (int half = kPgRows / 2; half > 0; half /= 2) {
    if (threadIdx.y < half) {
      sg[threadIdx.y][threadIdx.x] += sg[threadIdx.y + half][threadIdx.x];
      sb[threadIdx.y][threadIdx.x] += sb[threadIdx.y + half][threadIdx.x];
      ss[threadIdx.y][threadIdx.x] += ss[threadIdx.y + half][threadIdx.x];
    }
    __syncthreads();
  }
  if (threadIdx.y == 0 && d < D) {
    const float tg = sg[0][threadIdx.x], tb = sb[0][threadIdx.x];
    dgamma[d] = accumulate ? dgamma[d] + tg : tg;
    dbeta[d] = accumulate ? dbeta[d] + tb : tb;
    if (with_sum) dsum[d] = accumulate ? dsum[d] + ss[0][threadIdx.x] : ss[0][threadIdx.x];
  }
}

}  // namespace

namespace {
// Calls f(std::integral_constant<int, V>) for D = 128 V with V <= 8 (the warp-per-row kernels of
// layernorm_warp.cuh) and returns true; false for any other D.
template <typename F>
bool with_warp_width(int D, F&& f) {
  if (D % 128 != 0) return false;
  switch (D / 128) {
    case 1: f(std::integral_constant<int, 1>{}); return true;
    case 2: f(std::integral_constant<int, 2>{}); return true;
    case 3: f(std::integral_constant<int, 3>{}); return true;
    case 4: f(std::integral_constant<int, 4>{}); return true;
    case 5: f(std::integral_constant<int, 5>{}); return true;
    case 6: f(std::integral_constant<int, 6>{}); return true;
    case 7: f(std::integral_constant<int, 7>{}); return true;
    case 8: f(std::integral_constant<int, 8>{}); return true;
    default: return false;
  }
}
bool warp_width_ok(int D) { return D % 128 == 0 && D / 128 >= 1 && D / 128 <= 8; }

template <typename TY>
void forward_impl(const float* x, int ldx, const float* gamma, const float* beta, TY* y, int ldy,
                  float* mean, float* rstd, int rows, int D, float eps, cudaStream_t stream) {
  check_dims(rows, D, "layernorm_forward");
  if (rows == 0) return;
  const bool vec = D % 4 == 0 && ldx % 4 == 0 && ldy % 4 == 0 && aligned16(x) && aligned16(gamma) && aligned16(beta) &&
                   reinterpret_cast<uintptr_t>(y) % (4 * sizeof(TY)) == 0;
  const int warp_blocks = (rows + ln_warp::kWarps - 1) / ln_warp::kWarps;
  // One warp per row for D = 128 V (V <= 8), else one block per row.
  const bool by_warp = vec && with_warp_width(D, [&](auto v) {
    ln_warp::forward<decltype(v)::value, TY>
        <<<warp_blocks, ln_warp::kWarps * 32, 0, stream>>>(x, ldx, gamma, beta, y, ldy, mean, rstd, rows, eps);
  });
  if (!by_warp && vec)
    ln_forward_vec_kernel<TY><<<rows, ln_threads(D), 0, stream>>>(x, ldx, gamma, beta, y, ldy, mean, rstd, D, eps);
  else if (!by_warp)
    ln_forward_kernel<TY><<<rows, ln_threads(D), 0, stream>>>(x, ldx, gamma, beta, y, ldy, mean,
                                                              rstd, D, eps);
  CUDA_CHECK_LAUNCH();
}
}  // namespace

void layernorm_forward(const float* x, int ldx, const float* gamma, const float* beta, float* y,
                       int ldy, float* mean, float* rstd, int rows, int D, float eps,
                       cudaStream_t stream) {
  forward_impl(x, ldx, gamma, beta, y, ldy, mean, rstd, rows, D, eps, stream);
}

void layernorm_forward(const float* x, int ldx, const float* gamma, const float* beta,
                       __nv_bfloat16* y, int ldy, float* mean, float* rstd, int rows, int D,
                       float eps, cudaStream_t stream) {
  forward_impl(x, ldx, gamma, beta, y, ldy, mean, rstd, rows, D, eps, stream);
}

size_t layernorm_backward_scratch_floats(int rows, int D) {
  if (rows <= 0 || D <= 0) return 0;
  // Three partial rows per backward block. The block count is not monotonic in the row count
  // (771 rows: 386 blocks, 514 rows: 514), but it never exceeds min(rows, kLnMaxBlocks) on either
  // path (the warp kernels' count is at most 264), so this covers every row count up to `rows`;
  // so does the column_sum fallback's scratch.
  const size_t partials = 3 * (size_t)std::min(rows, kLnMaxBlocks) * (size_t)D;
  return std::max(partials, column_sum_scratch_floats(rows, D));
}

namespace {
template <typename TDY>
void backward_impl(const TDY* dy, int lddy, const float* x, int ldx, const float* mean,
                   const float* rstd, const float* gamma, float* dx, int lddx, bool add_dx,
                   float* dgamma, float* dbeta, bool accumulate, int rows, int D, float* scratch,
                   cudaStream_t stream, __nv_bfloat16* dx_bf16, float* dx_colsum) {
  check_dims(rows, D, "layernorm_backward");
  // With D a multiple of 4 and scratch 16-byte aligned, every partial row below is too.
  const bool vec = D % 4 == 0 && lddy % 4 == 0 && ldx % 4 == 0 && lddx % 4 == 0 && aligned16(x) && aligned16(dx) && aligned16(gamma) &&
                   reinterpret_cast<uintptr_t>(dy) % (4 * sizeof(TDY)) == 0 &&
                   reinterpret_cast<uintptr_t>(dx_bf16) % 8 == 0 && aligned16(scratch);
  const bool warp = vec && warp_width_ok(D);
  // The warp kernel's blocks are never more than the others' (layernorm_backward_scratch_floats).
  const int rpb = warp ? ln_warp::backward_rows_per_block(rows) : ln_rows_per_block(rows);
  const int nblocks = (rows + rpb - 1) / rpb;
  float* part_dgamma = scratch;
  float* part_dbeta = scratch + (size_t)nblocks * D;
  float* part_dsum = scratch + 2 * (size_t)nblocks * D;
  // The column sums of dx come from the vector kernels' partials; the scalar kernel leaves them to
  // column_sum afterwards (same values, another summation order).
  const bool fused_sum = dx_colsum != nullptr && vec;
  if (nblocks > 0 && warp) {
    with_warp_width(D, [&](auto v) {
      ln_warp::backward<decltype(v)::value, TDY><<<nblocks, ln_warp::kWarps * 32, 0, stream>>>(
          dy, lddy, x, ldx, mean, rstd, gamma, dx, lddx, add_dx, dx_bf16, part_dgamma, part_dbeta,
          fused_sum ? part_dsum : nullptr, rows, rpb);
    });
    CUDA_CHECK_LAUNCH();
  } else if (nblocks > 0 && vec) {
    ln_backward_vec_kernel<TDY><<<nblocks, ln_threads(D), 0, stream>>>(
        dy, lddy, x, ldx, mean, rstd, gamma, dx, lddx, add_dx, dx_bf16, part_dgamma, part_dbeta,
        fused_sum ? part_dsum : nullptr, rows, D, rpb);
    CUDA_CHECK_LAUNCH();
  } else if (nblocks > 0) {
    ln_backward_kernel<TDY><<<nblocks, ln_threads(D), 0, stream>>>(
        dy, lddy, x, ldx, mean, rstd, gamma, dx, lddx, add_dx, dx_bf16, part_dgamma, part_dbeta,
        rows, D, rpb);
    CUDA_CHECK_LAUNCH();
  }
  ln_param_grad_kernel<<<(D + kPgCols - 1) / kPgCols, dim3(kPgCols, kPgRows), 0, stream>>>(
      part_dgamma, part_dbeta, fused_sum ? part_dsum : nullptr, nblocks, D, dgamma, dbeta, dx_colsum,
      accumulate);
  CUDA_CHECK_LAUNCH();
  if (dx_colsum != nullptr && !fused_sum) column_sum(dx, rows, D, lddx, dx_colsum, accumulate, scratch, stream);
}
}  // namespace

void layernorm_backward(const float* dy, int lddy, const float* x, int ldx, const float* mean,
                        const float* rstd, const float* gamma, float* dx, int lddx, bool add_dx,
                        float* dgamma, float* dbeta, bool accumulate, int rows, int D,
                        float* scratch, cudaStream_t stream, __nv_bfloat16* dx_bf16, float* dx_colsum) {
  backward_impl(dy, lddy, x, ldx, mean, rstd, gamma, dx, lddx, add_dx, dgamma, dbeta, accumulate,
                rows, D, scratch, stream, dx_bf16, dx_colsum);
}

void layernorm_backward(const __nv_bfloat16* dy, int lddy, const float* x, int ldx,
                        const float* mean, const float* rstd, const float* gamma, float* dx,
                        int lddx, bool add_dx, float* dgamma, float* dbeta, bool accumulate,
                        int rows, int D, float* scratch, cudaStream_t stream,
                        __nv_bfloat16* dx_bf16, float* dx_colsum) {
  backward_impl(dy, lddy, x, ldx, mean, rstd, gamma, dx, lddx, add_dx, dgamma, dbeta, accumulate,
                rows, D, scratch, stream, dx_bf16, dx_colsum);
}

}  // namespace vitddp
