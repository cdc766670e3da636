// Softmax cross-entropy (torch.nn.CrossEntropyLoss, reduction='mean'), fp32, on a stream.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace vitddp {

/// Floats of scratch softmax_xent needs for `batch` rows.
inline size_t softmax_xent_scratch_floats(int batch) { return batch > 0 ? (size_t)batch : 1; }

/// Forward and backward at once. logits: [batch, classes] row-major; labels: [batch] int32.
///   loss = (1/batch) * sum_b (logsumexp(logits[b]) - logits[b, labels[b]])   -> *d_loss (device)
///   dlogits[b, k] = (softmax(logits[b])[k] - [k == labels[b]]) / batch        -> [batch, classes]
/// A label outside [0, classes) makes that row's loss (hence *d_loss) NaN and its dlogits NaN.
/// The batch mean is a fixed-order sum (deterministic). scratch: softmax_xent_scratch_floats.
void softmax_xent(const float* logits, const int32_t* labels, int batch, int classes,
                  float* d_loss, float* dlogits, float* scratch, cudaStream_t stream);

}  // namespace vitddp
