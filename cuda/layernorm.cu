#include "cuda/layernorm.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "cuda/block_reduce.cuh"
#include "cuda/check.h"

namespace vitddp {
namespace {

constexpr int kVpt = 4;  // values per thread: threads = ceil(D/4) rounded up to a warp

int ln_threads(int D) {
  const int t = ((D + kVpt - 1) / kVpt + 31) / 32 * 32;
  return std::min(1024, std::max(32, t));
}

// Rows handled by one backward block: about two blocks per SM of an H100/H200 for B*T rows.
int ln_rows_per_block(int rows) { return std::max(1, (rows + 263) / 264); }

void check_dims(int rows, int D, const char* what) {
  if (rows < 0 || D < 1 || D > 1024 * kVpt)
    throw std::invalid_argument(std::string(what) + ": unsupported rows=" + std::to_string(rows) +
                                " D=" + std::to_string(D) + " (need 1 <= D <= 4096)");
}

__global__ void ln_forward_kernel(const float* __restrict__ x, int ldx,
                                  const float* __restrict__ gamma, const float* __restrict__ beta,
                                  float* __restrict__ y, int ldy, float* __restrict__ mean_out,
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
  float* yr = y + (size_t)row * ldy;
#pragma unroll
  for (int i = 0; i < kVpt; ++i) {
    const int d = threadIdx.x + i * blockDim.x;
    if (d < D) yr[d] = fmaf((v[i] - mean) * rstd, gamma[d], beta[d]);
  }
  if (threadIdx.x == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

__global__ void ln_backward_kernel(const float* __restrict__ dy, int lddy,
                                   const float* __restrict__ x, int ldx,
                                   const float* __restrict__ mean, const float* __restrict__ rstd,
                                   const float* __restrict__ gamma, float* __restrict__ dx,
                                   int lddx, bool add_dx, float* __restrict__ part_dgamma,
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
  for (int r = r0; r < r1; ++r) {
    const float* dyr = dy + (size_t)r * lddy;
    const float* xr = x + (size_t)r * ldx;
    const float mu = mean[r], rs = rstd[r];
    float xh[kVpt], gy[kVpt];
    float a = 0.0f, b = 0.0f;
#pragma unroll
    for (int i = 0; i < kVpt; ++i) {
      const int d = threadIdx.x + i * blockDim.x;
      const float dyv = d < D ? dyr[d] : 0.0f;
      xh[i] = d < D ? (xr[d] - mu) * rs : 0.0f;
      gy[i] = g[i] * dyv;
      a += gy[i];
      b = fmaf(gy[i], xh[i], b);
      pdg[i] = fmaf(dyv, xh[i], pdg[i]);
      pdb[i] += dyv;
    }
    const float2 ab = block_sum2(a, b, scratch);
    const float ma = ab.x * inv_d, mb = ab.y * inv_d;
    float* dxr = dx + (size_t)r * lddx;
#pragma unroll
    for (int i = 0; i < kVpt; ++i) {
      const int d = threadIdx.x + i * blockDim.x;
      if (d < D) {
        const float v = rs * (gy[i] - ma - xh[i] * mb);
        dxr[d] = add_dx ? dxr[d] + v : v;
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

// dgamma[d] (+)= sum over blocks of the partials, in block order.
__global__ void ln_param_grad_kernel(const float* __restrict__ part_dgamma,
                                     const float* __restrict__ part_dbeta, int nblocks, int D,
                                     float* __restrict__ dgamma, float* __restrict__ dbeta,
                                     bool accumulate) {
  const int d = blockIdx.x * blockDim.x + threadIdx.x;
  if (d >= D) return;
  float sg = 0.0f, sb = 0.0f;
  for (int k = 0; k < nblocks; ++k) {
    sg += part_dgamma[(size_t)k * D + d];
    sb += part_dbeta[(size_t)k * D + d];
  }
  dgamma[d] = accumulate ? dgamma[d] + sg : sg;
  dbeta[d] = accumulate ? dbeta[d] + sb : sb;
}

}  // namespace

void layernorm_forward(const float* x, int ldx, const float* gamma, const float* beta, float* y,
                       int ldy, float* mean, float* rstd, int rows, int D, float eps,
                       cudaStream_t stream) {
  check_dims(rows, D, "layernorm_forward");
  if (rows == 0) return;
  ln_forward_kernel<<<rows, ln_threads(D), 0, stream>>>(x, ldx, gamma, beta, y, ldy, mean, rstd,
                                                        D, eps);
  CUDA_CHECK_LAUNCH();
}

size_t layernorm_backward_scratch_floats(int rows, int D) {
  const int rpb = ln_rows_per_block(rows);
  const size_t nblocks = (size_t)(rows + rpb - 1) / rpb;
  return 2 * nblocks * (size_t)D;
}

void layernorm_backward(const float* dy, int lddy, const float* x, int ldx, const float* mean,
                        const float* rstd, const float* gamma, float* dx, int lddx, bool add_dx,
                        float* dgamma, float* dbeta, bool accumulate, int rows, int D,
                        float* scratch, cudaStream_t stream) {
  check_dims(rows, D, "layernorm_backward");
  const int rpb = ln_rows_per_block(rows);
  const int nblocks = (rows + rpb - 1) / rpb;
  float* part_dgamma = scratch;
  float* part_dbeta = scratch + (size_t)nblocks * D;
  if (nblocks > 0) {
    ln_backward_kernel<<<nblocks, ln_threads(D), 0, stream>>>(dy, lddy, x, ldx, mean, rstd, gamma,
                                                              dx, lddx, add_dx, part_dgamma,
                                                              part_dbeta, rows, D, rpb);
    CUDA_CHECK_LAUNCH();
  }
  ln_param_grad_kernel<<<(D + 255) / 256, 256, 0, stream>>>(part_dgamma, part_dbeta, nblocks, D,
                                                            dgamma, dbeta, accumulate);
  CUDA_CHECK_LAUNCH();
}

}  // namespace vitddp
