// The hook through which a backward pass tells the reducer which gradients are final.
#pragma once
#include <cstddef>
#include <functional>
#include <vector>

#include "model/param_layout.h"

namespace vitddp {

/// Called by a backward pass, on the host, right after the work that finalises the gradients of
/// `param_indices` (registration indices into ParamLayout::params) has been issued (CPU: computed;
/// GPU: enqueued on the compute stream). Every parameter is reported exactly once per backward, in
/// gradient-ready order groups: head, final LayerNorm, then per encoder block from the last:
/// {mlp.3}, {mlp.0}, {ln_2}, {out_proj}, {in_proj}, {ln_1}; then {pos_embedding, class_token},
/// then {conv_proj}. The PyTorch counterpart is the autograd hook on AccumulateGrad that
/// c10d::Reducer::autograd_hook installs.
using GradReadyFn = std::function<void(const std::vector<size_t>& param_indices)>;

/// The groups one backward of a `layout` model reports, in the order it reports them, each as
/// GradReadyFn receives it (bias before weight; {pos_embedding, class_token}): 6 x layers + 4
/// groups (vit_l_32: 148). Every group but {pos_embedding, class_token} is a consecutive run of
/// ParamLayout::ready_order(), i.e. one contiguous slice of the flat buffer; class_token, last in
/// registration order, sits at the buffer's end, after conv_proj. CpuViT and GpuViT report exactly
/// these (tests/cpu/test_cpu_vit.cpp, tests/gpu/test_gpu_vit.cpp).
std::vector<std::vector<size_t>> grad_ready_groups(const ParamLayout& layout);

/// Per group of grad_ready_groups(layout): the elements of the longest prefix of the flat buffer
/// whose tensors are all reported once that group is (layout padding included). A DDP bucket is
/// such a prefix's slice, so a bucket ending at element e is complete at the first group whose
/// prefix reaches e. Non-decreasing; the last is layout.total. It equals the cumulative sum of
/// the groups' sizes except at {pos_embedding, class_token}, whose class_token lies past
/// conv_proj.
std::vector<size_t> grad_ready_prefix_elements(const ParamLayout& layout);

/// Checks the groups of one backward against grad_ready_groups(layout) as they are reported:
/// next() returns the group's index, or throws std::logic_error naming the expected and the
/// reported parameters when a backward reports another group (a model whose order changed).
class GradReadyOrder {
 public:
  explicit GradReadyOrder(const ParamLayout& layout) : groups_(grad_ready_groups(layout)) {}
  /// Forgets the last backward (call before each).
  void reset() { next_ = 0; }
  /// The index of group `params`, which must be the next one.
  size_t next(const std::vector<size_t>& params);
  /// Groups per backward.
  size_t size() const { return groups_.size(); }
  /// Groups reported since reset().
  size_t reported() const { return next_; }
  const std::vector<std::vector<size_t>>& groups() const { return groups_; }

 private:
  std::vector<std::vector<size_t>> groups_;
  size_t next_ = 0;
};

}  // namespace vitddp
