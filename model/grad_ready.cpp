#include "model/grad_ready.h"

#include <stdexcept>
#include <string>

namespace vitddp {

std::vector<std::vector<size_t>> grad_ready_groups(const ParamLayout& layout) {
  const ModelParams& n = layout.named;
  std::vector<std::vector<size_t>> g = {{n.head_b.index, n.head_w.index}, {n.ln_b.index, n.ln_w.index}};
  for (size_t l = n.blocks.size(); l-- > 0;) {
    const BlockParams& b = n.blocks[l];
    for (const auto& [bias, weight] : {std::pair{b.fc2_b, b.fc2_w}, std::pair{b.fc1_b, b.fc1_w},
                                       std::pair{b.ln2_b, b.ln2_w}, std::pair{b.proj_b, b.proj_w},
                                       std::pair{b.qkv_b, b.qkv_w}, std::pair{b.ln1_b, b.ln1_w}})
      g.push_back({bias.index, weight.index});
  }
  g.push_back({n.pos.index, n.cls.index});
  g.push_back({n.conv_b.index, n.conv_w.index});
  return g;
}

std::vector<size_t> grad_ready_prefix_elements(const ParamLayout& layout) {
  const std::vector<size_t> order = layout.ready_order();  // the flat buffer's order
  std::vector<char> ready(layout.params.size(), 0);
  std::vector<size_t> prefix;
  size_t next = 0;  // first tensor of `order` not reported yet
  for (const std::vector<size_t>& g : grad_ready_groups(layout)) {
    for (size_t p : g) ready[p] = 1;
    while (next < order.size() && ready[order[next]]) ++next;
    prefix.push_back(next < order.size() ? layout.params[order[next]].offset : layout.total);
  }
  return prefix;
}

namespace {
std::string list(const std::vector<size_t>& v) {
  std::string s = "{";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "}";
}
}  // namespace

size_t GradReadyOrder::next(const std::vector<size_t>& params) {
  if (next_ >= groups_.size())
    throw std::logic_error("gradient-ready group " + list(params) + " reported after all " +
                           std::to_string(groups_.size()) + " groups of the backward");
  if (params != groups_[next_])
    throw std::logic_error("gradient-ready group " + std::to_string(next_) + ": expected parameters " +
                           list(groups_[next_]) + ", the backward reported " + list(params));
  return next_++;
}

}  // namespace vitddp
