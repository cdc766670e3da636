#include "model/param_layout.h"

#include <algorithm>
#include <stdexcept>
#include <string>

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
  L.named = find_model_params(L);
  return L;
}

ModelParams find_model_params(const ParamLayout& L) {
  auto ref = [&](const std::string& name) {
    const size_t i = L.index_of(name);
    return ParamRef{i, L.params[i].offset, L.params[i].numel};
  };
  ModelParams m;
  m.cls = ref("class_token");
  m.conv_w = ref("conv_proj.weight");
  m.conv_b = ref("conv_proj.bias");
  m.pos = ref("encoder.pos_embedding");
  for (int l = 0; l < L.cfg.layers; ++l) {
    const std::string b = "encoder.layers.encoder_layer_" + std::to_string(l) + ".";
    BlockParams k;
    k.ln1_w = ref(b + "ln_1.weight");
    k.ln1_b = ref(b + "ln_1.bias");
    k.qkv_w = ref(b + "self_attention.in_proj_weight");
    k.qkv_b = ref(b + "self_attention.in_proj_bias");
    k.proj_w = ref(b + "self_attention.out_proj.weight");
    k.proj_b = ref(b + "self_attention.out_proj.bias");
    k.ln2_w = ref(b + "ln_2.weight");
    k.ln2_b = ref(b + "ln_2.bias");
    k.fc1_w = ref(b + "mlp.0.weight");
    k.fc1_b = ref(b + "mlp.0.bias");
    k.fc2_w = ref(b + "mlp.3.weight");
    k.fc2_b = ref(b + "mlp.3.bias");
    m.blocks.push_back(k);
  }
  m.ln_w = ref("encoder.ln.weight");
  m.ln_b = ref("encoder.ln.bias");
  m.head_w = ref("heads.head.weight");
  m.head_b = ref("heads.head.bias");
  return m;
}

std::vector<ParamRef> bf16_model_fp32_params(const ParamLayout& L) {
  const ModelParams& m = L.named;
  std::vector<ParamRef> v = {m.cls, m.conv_b, m.pos};
  for (const BlockParams& b : m.blocks)
    for (const ParamRef& r : {b.ln1_w, b.ln1_b, b.proj_b, b.ln2_w, b.ln2_b, b.fc2_b}) v.push_back(r);
  for (const ParamRef& r : {m.ln_w, m.ln_b, m.head_w, m.head_b}) v.push_back(r);
  std::sort(v.begin(), v.end(), [](const ParamRef& a, const ParamRef& b) { return a.index < b.index; });
  return v;
}

std::vector<ParamRef> weights_updated_in_backward(const ParamLayout& L) {
  std::vector<ParamRef> v;
  for (const BlockParams& b : L.named.blocks)
    for (const ParamRef& r : {b.qkv_w, b.proj_w, b.fc1_w, b.fc2_w}) v.push_back(r);
  std::sort(v.begin(), v.end(), [](const ParamRef& a, const ParamRef& b) { return a.index < b.index; });
  return v;
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
  const ModelParams& n = L.named;
  ViTTensors<T> t;
  t.class_token = n.cls.in(base);
  t.conv_w = n.conv_w.in(base);
  t.conv_b = n.conv_b.in(base);
  t.pos_embedding = n.pos.in(base);
  for (const BlockParams& k : n.blocks) {
    BlockTensors<T> b;
    b.ln1_w = k.ln1_w.in(base);
    b.ln1_b = k.ln1_b.in(base);
    b.qkv_w = k.qkv_w.in(base);
    b.qkv_b = k.qkv_b.in(base);
    b.proj_w = k.proj_w.in(base);
    b.proj_b = k.proj_b.in(base);
    b.ln2_w = k.ln2_w.in(base);
    b.ln2_b = k.ln2_b.in(base);
    b.fc1_w = k.fc1_w.in(base);
    b.fc1_b = k.fc1_b.in(base);
    b.fc2_w = k.fc2_w.in(base);
    b.fc2_b = k.fc2_b.in(base);
    t.blocks.push_back(b);
  }
  t.ln_w = n.ln_w.in(base);
  t.ln_b = n.ln_b.in(base);
  t.head_w = n.head_w.in(base);
  t.head_b = n.head_b.in(base);
  return t;
}

template ViTTensors<float> bind_tensors(const ParamLayout&, float*);
template ViTTensors<const float> bind_tensors(const ParamLayout&, const float*);
template ViTTensors<double> bind_tensors(const ParamLayout&, double*);
template ViTTensors<const double> bind_tensors(const ParamLayout&, const double*);

}  // namespace vitddp
