#include "model/param_layout.h"

#include <stdexcept>

namespace vitddp {

ParamLayout make_param_layout(const ViTConfig& c) {
  ParamLayout L;
  L.cfg = c;
  const int64_t D = c.hidden, M = c.mlp_dim, K = c.num_classes, T = c.seq_len();
  auto add = [&](std::string name, std::vector<int64_t> shape) {
    ParamInfo p;
    p.name = std::move(name);
    p.shape = std::move(shape);
    p.numel = 1;
    for (auto s : p.shape) p.numel *= static_cast<size_t>(s);
    L.params.push_back(std::move(p));
  };
  add("class_token", {1, 1, D});
  add("conv_proj.weight", {D, c.channels, c.patch_size, c.patch_size});
  add("conv_proj.bias", {D});
  add("encoder.pos_embedding", {1, T, D});
  for (int i = 0; i < c.layers; ++i) {
    const std::string b = "encoder.layers.encoder_layer_" + std::to_string(i) + ".";
    add(b + "ln_1.weight", {D});
    add(b + "ln_1.bias", {D});
    add(b + "self_attention.in_proj_weight", {3 * D, D});
    add(b + "self_attention.in_proj_bias", {3 * D});
    add(b + "self_attention.out_proj.weight", {D, D});
    add(b + "self_attention.out_proj.bias", {D});
    add(b + "ln_2.weight", {D});
    add(b + "ln_2.bias", {D});
    add(b + "mlp.0.weight", {M, D});
    add(b + "mlp.0.bias", {M});
    add(b + "mlp.3.weight", {D, M});
    add(b + "mlp.3.bias", {D});
  }
  add("encoder.ln.weight", {D});
  add("encoder.ln.bias", {D});
  add("heads.head.weight", {K, D});
  add("heads.head.bias", {K});
  // Gradient-ready order: last registered first.
  size_t off = 0;
  for (size_t i = L.params.size(); i-- > 0;) {
    L.params[i].offset = off;
    off += (L.params[i].numel + 3) / 4 * 4;
  }
  L.total = off;
  return L;
}

size_t ParamLayout::index_of(const std::string& name) const {
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i].name == name) return i;
  throw std::out_of_range("no parameter named '" + name + "' in " + cfg.name);
}

size_t ParamLayout::parameter_count() const {
  size_t n = 0;
  for (const auto& p : params) n += p.numel;
  return n;
}

std::vector<size_t> ParamLayout::ready_order() const {
  std::vector<size_t> order;
  for (size_t i = params.size(); i-- > 0;) order.push_back(i);
  return order;
}

template <typename T>
ViTTensors<T> bind_tensors(const ParamLayout& L, T* base) {
  size_t i = 0;
  auto next = [&]() { return base + L.params[i++].offset; };
  ViTTensors<T> t;
  t.class_token = next();
  t.conv_w = next();
  t.conv_b = next();
  t.pos_embedding = next();
  t.blocks.resize(L.cfg.layers);
  for (auto& b : t.blocks) {
    b.ln1_w = next();
    b.ln1_b = next();
    b.qkv_w = next();
    b.qkv_b = next();
    b.proj_w = next();
    b.proj_b = next();
    b.ln2_w = next();
    b.ln2_b = next();
    b.fc1_w = next();
    b.fc1_b = next();
    b.fc2_w = next();
    b.fc2_b = next();
  }
  t.ln_w = next();
  t.ln_b = next();
  t.head_w = next();
  t.head_b = next();
  return t;
}

template ViTTensors<float> bind_tensors(const ParamLayout&, float*);
template ViTTensors<const float> bind_tensors(const ParamLayout&, const float*);
template ViTTensors<double> bind_tensors(const ParamLayout&, double*);
template ViTTensors<const double> bind_tensors(const ParamLayout&, const double*);

}  // namespace vitddp
