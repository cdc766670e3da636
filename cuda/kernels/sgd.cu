#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include "cuda/check/check_cuda.h"
#include "cuda/kernels/sgd.h"
#include "cuda/kernels/vec4.cuh"

namespace vitddp {
namespace {

struct SgdArgs {
  float lr, mom, wd, scale;
  bool use_wd, use_mom, first_step;
};

/// One element of torch.optim.SGD's update (model/sgd.h); returns the new parameter.
__device__ __forceinline__ float sgd_update(float pi, float gi, float* buf, const SgdArgs& a) {
  float g = a.scale * gi;
  if (a.use_wd) g = fmaf(a.wd, pi, g);
  if (a.use_mom) {
    const float b = a.first_step ? g : fmaf(a.mom, *buf, g);
    *buf = b;
    g = b;
  }
  return pi - a.lr * g;
}

/// sgd_update on four elements; `buf` their momentum values (unused without momentum).
__device__ __forceinline__ float4 sgd_update4(float4 p, const float4& g, float4* buf, const SgdArgs& a) {
  p.x = sgd_update(p.x, g.x, &buf->x, a);
  p.y = sgd_update(p.y, g.y, &buf->y, a);
  p.z = sgd_update(p.z, g.z, &buf->z, a);
  p.w = sgd_update(p.w, g.w, &buf->w, a);
  return p;
}

/// With vec4, four elements per thread (float4 loads/stores) and then the n % 4 tail; without
/// (a pointer not aligned for the vector accesses), one element per thread. The same per-element
/// arithmetic either way. Optionally also writes the bf16 working copy of the updated parameters
/// (8 bytes per 4 elements).
__global__ void sgd_kernel(float* __restrict__ p, const float* __restrict__ grad, float* __restrict__ buf,
                           __nv_bfloat16* __restrict__ p16, size_t n, SgdArgs a, const int* __restrict__ skip,
                           bool vec4) {
  if (skip && *skip) return;
  grid_stride<4>(
      n, vec4,
      [&](size_t i) {
        float4 pv = reinterpret_cast<float4*>(p)[i];
        const float4 gv = reinterpret_cast<const float4*>(grad)[i];
        float4 bv = make_float4(0.f, 0.f, 0.f, 0.f);
        if (a.use_mom && !a.first_step) bv = reinterpret_cast<float4*>(buf)[i];
        pv = sgd_update4(pv, gv, &bv, a);
        reinterpret_cast<float4*>(p)[i] = pv;
        if (a.use_mom) reinterpret_cast<float4*>(buf)[i] = bv;
        if (p16) store4(p16 + 4 * i, F4{{pv.x, pv.y, pv.z, pv.w}});
      },
      [&](size_t e) {
        float b = a.use_mom && !a.first_step ? buf[e] : 0.f;
        const float v = sgd_update(p[e], grad[e], &b, a);
        p[e] = v;
        if (a.use_mom) buf[e] = b;
        if (p16) p16[e] = __float2bfloat16_rn(v);
      });
}

/// With vec4, float4 loads and then the n % 4 tail; else one float per thread.
__global__ void nonfinite_kernel(const float* __restrict__ x, size_t n, bool vec4, int* flag) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t start = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  bool bad = false;
  if (vec4) {
    const size_t n4 = n / 4;
    for (size_t i = start; i < n4; i += stride) {
      const float4 v = reinterpret_cast<const float4*>(x)[i];
      bad |= !isfinite(v.x) || !isfinite(v.y) || !isfinite(v.z) || !isfinite(v.w);
    }
    start += 4 * n4;
  }
  for (size_t i = start; i < n; i += stride) bad |= !isfinite(x[i]);
  if (__syncthreads_or(bad) && threadIdx.x == 0) *flag = 1;
}

/// Element i lies in one of the ranges [bounds[2j], bounds[2j+1]) (sorted): an odd count of bounds <= i.
__device__ __forceinline__ bool in_ranges(size_t i, const size_t* bounds, int count) {
  int lo = 0, hi = count;  // first bound > i
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (bounds[mid] <= i)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo & 1;
}

/// One float4 chunk per thread and step of the grid-stride loop; tiles of kSgdTile elements.
__global__ void sgd_rest_kernel(float* __restrict__ p, const float* __restrict__ grad, __nv_bfloat16* __restrict__ p16,
                                size_t n4, SgdArgs a, const unsigned char* __restrict__ tile_kind,
                                const size_t* __restrict__ bounds, int bound_count, int* flag) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  bool bad = false;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += stride) {
    const unsigned char kind = tile_kind[(4 * i) / kSgdTile];
    const bool done = kind == 1 || (kind == 2 && in_ranges(4 * i, bounds, bound_count));
    float4 pv = reinterpret_cast<float4*>(p)[i];
    if (!done) {
      const float4 gv = reinterpret_cast<const float4*>(grad)[i];
      float4 unused = make_float4(0.f, 0.f, 0.f, 0.f);
      pv = sgd_update4(pv, gv, &unused, a);
      reinterpret_cast<float4*>(p)[i] = pv;
    }
    bad |= !isfinite(pv.x) || !isfinite(pv.y) || !isfinite(pv.z) || !isfinite(pv.w);
    if (p16) store4(p16 + 4 * i, F4{{pv.x, pv.y, pv.z, pv.w}});
  }
  if (__syncthreads_or(bad) && threadIdx.x == 0) *flag = 1;
}

__global__ void write_pair_kernel(float* d, float a, float b) {
  d[0] = a;
  d[1] = b;
}

bool aligned(const void* ptr, size_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes == 0; }

/// Blocks of 256 threads for `work` items, at most `cap`, at least 1.
int blocks_for(size_t work, size_t cap) {
  return static_cast<int>(std::max<size_t>(1, std::min<size_t>((work + 255) / 256, cap)));
}

}  // namespace

void flag_nonfinite(const float* x, size_t n, int* d_flag, cudaStream_t stream) {
  if (n == 0) return;
  const bool vec4 = aligned(x, 16);  // whole flat buffers are (cudaMalloc: 256 bytes); a segment may not be
  nonfinite_kernel<<<blocks_for(vec4 ? n / 4 : n, 132 * 8), 256, 0, stream>>>(x, n, vec4, d_flag);
  CUDA_CHECK_LAUNCH();
}

void backward_update_tiles(const std::vector<std::pair<size_t, size_t>>& ranges, size_t n,
                           std::vector<unsigned char>* tile_kind, std::vector<size_t>* bounds) {
  const size_t tiles = (n + kSgdTile - 1) / kSgdTile;
  std::vector<size_t> covered(tiles, 0);  // elements of each tile inside a range
  bounds->clear();
  size_t last_end = 0;
  for (const auto& [b, e] : ranges) {
    if (b < last_end || e < b || e > n || b % 4 || e % 4)
      throw std::invalid_argument("backward_update_tiles: range [" + std::to_string(b) + ", " + std::to_string(e) +
                                  ") unsorted, overlapping, beyond " + std::to_string(n) +
                                  " elements or not a multiple of 4");
    last_end = e;
    bounds->push_back(b);
    bounds->push_back(e);
    for (size_t t = b / kSgdTile; t < tiles && t * kSgdTile < e; ++t)
      covered[t] += std::min(e, (t + 1) * kSgdTile) - std::max(b, t * kSgdTile);
  }
  tile_kind->assign(tiles, 0);
  for (size_t t = 0; t < tiles; ++t) {
    const size_t size = std::min(n, (t + 1) * kSgdTile) - t * kSgdTile;
    (*tile_kind)[t] = covered[t] == 0 ? 0 : covered[t] == size ? 1 : 2;
  }
}

void sgd_rest_after_backward(float* params, const float* grads, size_t n, const SgdConfig& cfg,
                             const BackwardUpdateMap& map, int* d_flag, cudaStream_t stream,
                             __nv_bfloat16* params_bf16) {
  if (n == 0) return;
  if (n % 4 || !aligned(params, 16) || !aligned(grads, 16) || (params_bf16 && !aligned(params_bf16, 8)))
    throw std::invalid_argument(
        "sgd_rest_after_backward: n must be a multiple of 4 and the buffers aligned for "
        "vector accesses (whole cudaMalloc'd buffers are)");
  if (cfg.momentum != 0)
    throw std::invalid_argument(
        "sgd_rest_after_backward: SGD with momentum keeps a buffer the update in backward "
        "does not");
  const SgdArgs a{(float)cfg.lr, 0.f,  (float)cfg.weight_decay, (float)cfg.grad_scale, cfg.weight_decay != 0,
                  false,         false};
  sgd_rest_kernel<<<blocks_for(n / 4, 132 * 16), 256, 0, stream>>>(params, grads, params_bf16, n / 4, a, map.tile_kind,
                                                                   map.bounds, map.bound_count, d_flag);
  CUDA_CHECK_LAUNCH();
}

void write_sgd_gemm_scalars(const SgdConfig& cfg, float* d_alpha_beta, cudaStream_t stream) {
  write_pair_kernel<<<1, 1, 0, stream>>>(d_alpha_beta, (float)(-cfg.lr * cfg.grad_scale),
                                         (float)(1.0 - cfg.lr * cfg.weight_decay));
  CUDA_CHECK_LAUNCH();
}

void sgd_step_gpu(float* params, const float* grads, float* momentum_buf, size_t n,
                  const SgdConfig& cfg, bool first_step, cudaStream_t stream, const int* d_skip,
                  __nv_bfloat16* params_bf16) {
  if (n == 0) return;
  const SgdArgs a{(float)cfg.lr, (float)cfg.momentum, (float)cfg.weight_decay, (float)cfg.grad_scale,
                  cfg.weight_decay != 0, cfg.momentum != 0, first_step};
  // Whole cudaMalloc'd buffers are 256-byte aligned; a segment of them (ZeRO-1's chunk) may not be.
  const bool vec4 = aligned(params, 16) && aligned(grads, 16) && (!a.use_mom || aligned(momentum_buf, 16)) &&
                    (!params_bf16 || aligned(params_bf16, 8));
  sgd_kernel<<<blocks_for(vec4 ? n / 4 : n, 132 * 16), 256, 0, stream>>>(params, grads, momentum_buf, params_bf16, n,
                                                                          a, d_skip, vec4);
  CUDA_CHECK_LAUNCH();
}

}  // namespace vitddp
