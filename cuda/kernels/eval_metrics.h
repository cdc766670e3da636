// Per-sample classification metrics of a batch of logits (evaluation pass), fp32, on a stream.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace vitddp {

/// For each row b of logits [batch, classes] (row-major fp32, device) with label labels[b]
/// (int32, device):
///   row_loss[b]    = logsumexp(logits[b]) - logits[b, labels[b]]   (cross-entropy, nats, fp32)
///   row_correct[b] = 1 if argmax_k logits[b, k] == labels[b] else 0 (first maximum on ties, as
///                    torch.argmax; NaN logits never win)
/// A label outside [0, classes) gives row_loss NaN and row_correct 0. One warp per row; no
/// atomics, so the host sums the rows in a fixed order. Asynchronous on `stream`. Throws
/// std::invalid_argument when batch < 1 or classes < 1, std::runtime_error on a launch error.
void eval_row_metrics(const float* logits, const int32_t* labels, int batch, int classes, float* row_loss,
                      int32_t* row_correct, cudaStream_t stream);

}  // namespace vitddp
