// The hook through which a backward pass tells the reducer which gradients are final.
#pragma once
#include <cstddef>
#include <functional>
#include <vector>

namespace vitddp {

/// Called by a backward pass, on the host, right after the work that finalises the gradients of
/// `param_indices` (registration indices into ParamLayout::params) has been issued (CPU: computed;
/// GPU: enqueued on the compute stream). Every parameter is reported exactly once per backward, in
/// gradient-ready order groups: head, final LayerNorm, then per encoder block from the last:
/// {mlp.3}, {mlp.0}, {ln_2}, {out_proj}, {in_proj}, {ln_1}; then {pos_embedding, class_token},
/// then {conv_proj}. The PyTorch counterpart is the autograd hook on AccumulateGrad that
/// c10d::Reducer::autograd_hook installs.
using GradReadyFn = std::function<void(const std::vector<size_t>& param_indices)>;

}  // namespace vitddp
