// Fused AdamW over the flat parameter buffer.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "model/adamw.h"

namespace vitddp {

/// Enqueues update number `step` (1-based, as torch's state['step']) of torch.optim.AdamW over n
/// fp32 elements on `stream`, in one kernel: the semantics and formula of adamw_step_host
/// (model/adamw.h), fp32 element arithmetic with the double-precision scalars of adamw_scalars
/// rounded to fp32. All pointers are device pointers of n elements; exp_avg and exp_avg_sq must
/// be zero before step 1. When `d_skip` (device int, may be null) is non-zero at run time the
/// kernel leaves everything unchanged (as sgd_step_gpu: a step with non-finite gradients is
/// skipped without a host round trip); PyTorch does not count a skipped step, so the caller then
/// passes the same `step` again next time. Throws std::invalid_argument as adamw_scalars (step < 1,
/// bad hyper-parameters) and std::runtime_error on a launch failure (cuda/check/check_cuda.h).
void adamw_step_gpu(float* params, const float* grads, float* exp_avg, float* exp_avg_sq, size_t n,
                    const AdamWConfig& cfg, int64_t step, cudaStream_t stream, const int* d_skip = nullptr);

}  // namespace vitddp
