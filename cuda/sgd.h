// Fused SGD over the flat parameter buffer.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "model/sgd.h"

namespace vitddp {

/// Enqueues one torch.optim.SGD step over n fp32 elements on `stream` (semantics of
/// sgd_step_host in model/sgd.h; fp32 arithmetic). `momentum_buf` may be null when
/// cfg.momentum == 0. All pointers are device pointers of n elements. When `d_skip` (device int,
/// may be null) is non-zero at run time the kernel leaves everything unchanged: a step whose
/// gradients are not finite is skipped without a host round trip.
void sgd_step_gpu(float* params, const float* grads, float* momentum_buf, size_t n,
                  const SgdConfig& cfg, bool first_step, cudaStream_t stream, const int* d_skip = nullptr);

/// Sets *d_flag = 1 (device int) if any of the n floats at `x` is NaN or infinite; leaves it
/// unchanged otherwise (the caller zeroes it first). Enqueued on `stream`.
void flag_nonfinite(const float* x, size_t n, int* d_flag, cudaStream_t stream);

}  // namespace vitddp
