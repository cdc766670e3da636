// Fused SGD over the flat parameter buffer.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

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

/// Sets *d_flag = 1 (device int) if any of the n floats at `x` is NaN or infinite; leaves it
/// unchanged otherwise (the caller zeroes it first). Enqueued on `stream`. Any float-aligned `x`
/// (float4 loads when it is 16-byte aligned).
void flag_nonfinite(const float* x, size_t n, int* d_flag, cudaStream_t stream);

}  // namespace vitddp
