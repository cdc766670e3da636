// The hook through which a forward pass says which parameters it is about to read.
#pragma once
#include <cstddef>
#include <functional>
#include <vector>

namespace vitddp {

/// Called by a forward pass, on the host, right before it issues the first work that reads the
/// parameters `param_indices` (registration indices into ParamLayout::params; GPU: before the
/// first kernel or GEMM reading them, fp32 or their bf16 copy, is enqueued on the compute stream),
/// so the caller can make that stream wait for them right then (ZeRO-1: the all-gather of the
/// buckets that hold them). Every parameter is reported exactly once per forward, in the order the
/// forward uses them: {conv_proj.weight, conv_proj.bias}, {class_token, encoder.pos_embedding},
/// then per encoder block from the first its 12 tensors (BlockParams::all()), then
/// {encoder.ln.weight, encoder.ln.bias, heads.head.weight, heads.head.bias}. The mirror image of
/// GradReadyFn (model/grad_ready.h) for the all-gathers of the parameters.
using ParamsNeededFn = std::function<void(const std::vector<size_t>& param_indices)>;

}  // namespace vitddp
