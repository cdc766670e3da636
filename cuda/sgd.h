// Fused SGD over the flat parameter buffer.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "model/sgd.h"

namespace vitddp {

/// Enqueues one torch.optim.SGD step over n fp32 elements on `stream` (semantics of
/// sgd_step_host in model/sgd.h; fp32 arithmetic). `momentum_buf` may be null when
/// cfg.momentum == 0. All pointers are device pointers of n elements.
void sgd_step_gpu(float* params, const float* grads, float* momentum_buf, size_t n,
                  const SgdConfig& cfg, bool first_step, cudaStream_t stream);

}  // namespace vitddp
