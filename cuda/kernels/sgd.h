// Fused SGD over the flat parameter buffer.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <utility>
#include <vector>

#include "model/sgd.h"

namespace vitddp {

/// Enqueues one torch.optim.SGD step over n fp32 elements on `stream` (semantics of
/// sgd_step_host in model/sgd.h; fp32 arithmetic). `momentum_buf` may be null when
/// cfg.momentum == 0. All pointers are device pointers of n elements. When `d_skip` (device int,
/// may be null) is non-zero at run time the kernel leaves everything unchanged: a step whose
/// gradients are not finite is skipped without a host round trip. When `params_bf16` (device,
/// n bf16, may be null) is given, the same pass also writes bf16(new parameter) there, round to
/// nearest even: the bf16 working copy of --precision bf16 stays current without a separate cast
/// (14 instead of 18 bytes per element without momentum); a skipped step leaves it unchanged too.
/// Vectorised, 4 elements per thread, when the pointers are 16-byte aligned (the bf16 copy 8-byte),
/// as whole cudaMalloc'd buffers are; otherwise one element per thread, with the same result.
void sgd_step_gpu(float* params, const float* grads, float* momentum_buf, size_t n,
                  const SgdConfig& cfg, bool first_step, cudaStream_t stream, const int* d_skip = nullptr,
                  __nv_bfloat16* params_bf16 = nullptr);

/// Which float4 chunks of a flat buffer were already updated by backward (--optimizer-in-backward,
/// WeightUpdate in cuda/model/gpu_vit.h), for sgd_rest_after_backward: the sorted, disjoint element ranges of those
/// tensors as device arrays, plus one byte per tile of kSgdTile elements (0: no chunk of the tile
/// updated, 1: every chunk, 2: both kinds, looked up in the ranges). Built once by
/// backward_update_tiles (src/engines/backward_update_gpu.h holds the device copy); the ranges must start and end at
/// multiples of 4 elements (ParamLayout aligns every tensor so).
constexpr size_t kSgdTile = 1024;
struct BackwardUpdateMap {
  const unsigned char* tile_kind = nullptr;  ///< device, ceil(n / kSgdTile) bytes
  const size_t* bounds = nullptr;            ///< device, [begin0, end0, begin1, end1, ...] in elements
  int bound_count = 0;                       ///< 2 x the number of ranges
};

/// Host side of BackwardUpdateMap: the tile bytes and bounds for ranges [begin, end) of a buffer of
/// n elements. Throws std::invalid_argument when a range is unsorted, overlapping, out of [0, n]
/// or not a multiple of 4 at either end.
void backward_update_tiles(const std::vector<std::pair<size_t, size_t>>& ranges, size_t n,
                           std::vector<unsigned char>* tile_kind, std::vector<size_t>* bounds);

/// The rest of an SGD step (no momentum) after a backward that applied it to the tensors of `map`,
/// in one pass over the whole flat buffer of n elements (n a multiple of 4, pointers 16-byte
/// aligned, the bf16 copy 8-byte; std::invalid_argument otherwise): every other element gets
/// torch.optim.SGD's update from `grads` (cfg: lr, weight_decay, grad_scale; as sgd_step_gpu);
/// every element's new value is checked (*d_flag = 1 when one is NaN or infinite; the caller zeroes
/// the flag first) and, with params_bf16, rounded into the bf16 working copy. 6 bytes per element
/// already updated with the bf16 copy (4 without), 14 per other element.
void sgd_rest_after_backward(float* params, const float* grads, size_t n, const SgdConfig& cfg,
                             const BackwardUpdateMap& map, int* d_flag, cudaStream_t stream,
                             __nv_bfloat16* params_bf16 = nullptr);

/// Writes {-lr * grad_scale, 1 - lr * weight_decay} of `cfg` (as floats; the beta loses products below
/// about 6e-8, which is why --optimizer-in-backward refuses weight decay) to d_alpha_beta (device, 2
/// floats) on `stream`: the alpha and beta of linear_update_weight for an SGD step without momentum.
void write_sgd_gemm_scalars(const SgdConfig& cfg, float* d_alpha_beta, cudaStream_t stream);

/// Sets *d_flag = 1 (device int) if any of the n floats at `x` is NaN or infinite; leaves it
/// unchanged otherwise (the caller zeroes it first). Enqueued on `stream`. Any float-aligned `x`
/// (float4 loads when it is 16-byte aligned).
void flag_nonfinite(const float* x, size_t n, int* d_flag, cudaStream_t stream);

}  // namespace vitddp
