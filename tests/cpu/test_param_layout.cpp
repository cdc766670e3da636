// The per-role view of the parameter table (ParamLayout::named, model/param_layout.h): every
// reference names the torchvision state_dict entry of its role, with that entry's index, offset
// and size, and together they cover the table exactly once.
#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "model/param_layout.h"
#include "model/vit_config.h"
#include "tests/catch.h"

using namespace vitddp;

namespace {

/// (torchvision name, reference) for every role of `m`, in registration order.
std::vector<std::pair<std::string, ParamRef>> roles(const ModelParams& m) {
  std::vector<std::pair<std::string, ParamRef>> r = {
      {"class_token", m.cls}, {"conv_proj.weight", m.conv_w}, {"conv_proj.bias", m.conv_b},
      {"encoder.pos_embedding", m.pos}};
  for (size_t l = 0; l < m.blocks.size(); ++l) {
    const std::string p = "encoder.layers.encoder_layer_" + std::to_string(l) + ".";
    const BlockParams& b = m.blocks[l];
    for (const auto& [name, ref] : std::vector<std::pair<std::string, ParamRef>>{
             {"ln_1.weight", b.ln1_w}, {"ln_1.bias", b.ln1_b},
             {"self_attention.in_proj_weight", b.qkv_w}, {"self_attention.in_proj_bias", b.qkv_b},
             {"self_attention.out_proj.weight", b.proj_w}, {"self_attention.out_proj.bias", b.proj_b},
             {"ln_2.weight", b.ln2_w}, {"ln_2.bias", b.ln2_b}, {"mlp.0.weight", b.fc1_w}, {"mlp.0.bias", b.fc1_b},
             {"mlp.3.weight", b.fc2_w}, {"mlp.3.bias", b.fc2_b}})
      r.emplace_back(p + name, ref);
  }
  for (const auto& e : std::vector<std::pair<std::string, ParamRef>>{{"encoder.ln.weight", m.ln_w},
                                                                     {"encoder.ln.bias", m.ln_b},
                                                                     {"heads.head.weight", m.head_w},
                                                                     {"heads.head.bias", m.head_b}})
    r.push_back(e);
  return r;
}

}  // namespace

TEST_CASE("ParamLayout::named: every role is its torchvision tensor", "[layout]") {
  for (const std::string model : {"vit_micro", "vit_tiny", "vit_b_32", "vit_l_32"}) {
    const ParamLayout L = make_param_layout(vit_config(model));
    const ViTConfig& c = L.cfg;
    INFO(model);
    REQUIRE(L.named.blocks.size() == static_cast<size_t>(c.layers));
    const auto r = roles(L.named);
    REQUIRE(r.size() == L.params.size());
    std::map<size_t, int> seen;
    for (const auto& [name, ref] : r) {
      INFO(name);
      REQUIRE(ref.index < L.params.size());
      CHECK(L.params[ref.index].name == name);
      CHECK(ref.offset == L.params[ref.index].offset);
      CHECK(ref.numel == L.params[ref.index].numel);
      ++seen[ref.index];
    }
    CHECK(seen.size() == L.params.size());  // each tensor exactly once
    // Sizes from the configuration (torchvision's shapes).
    const size_t D = c.hidden, M = c.mlp_dim, K = c.num_classes, T = c.seq_len();
    CHECK(L.named.pos.numel == T * D);
    CHECK(L.named.head_w.numel == K * D);
    CHECK(L.named.conv_w.numel == D * c.patch_dim());
    for (const BlockParams& b : L.named.blocks) {
      CHECK(b.qkv_w.numel == 3 * D * D);
      CHECK(b.fc1_w.numel == M * D);
      CHECK(b.fc2_w.numel == D * M);
      REQUIRE(b.all().size() == 12);
      CHECK(b.all().front().index == b.ln1_w.index);
      CHECK(b.all().back().index == b.fc2_b.index);
    }
  }
}

TEST_CASE("bind_tensors points at the named offsets", "[layout]") {
  const ParamLayout L = make_param_layout(vit_config("vit_micro"));
  std::vector<float> buf(L.total);
  float* base = buf.data();
  const ViTTensors<float> t = bind_tensors(L, base);
  CHECK(t.class_token == base + L.params[L.index_of("class_token")].offset);
  CHECK(t.head_b == base);  // gradient-ready order: the last registered tensor first
  CHECK(t.head_w == base + L.params[L.index_of("heads.head.weight")].offset);
  REQUIRE(t.blocks.size() == L.named.blocks.size());
  const size_t last = t.blocks.size() - 1;
  const std::string p = "encoder.layers.encoder_layer_" + std::to_string(last) + ".";
  CHECK(t.blocks[last].qkv_w == base + L.params[L.index_of(p + "self_attention.in_proj_weight")].offset);
  CHECK(t.blocks[last].fc2_b == base + L.params[L.index_of(p + "mlp.3.bias")].offset);
}

TEST_CASE("find_model_params names a missing tensor", "[layout]") {
  ParamLayout L = make_param_layout(vit_config("vit_micro"));
  L.params[L.index_of("encoder.layers.encoder_layer_0.mlp.0.bias")].name = "encoder.layers.encoder_layer_0.mlp.1.bias";
  CHECK_THROWS_WITH(find_model_params(L), Catch::Contains("encoder.layers.encoder_layer_0.mlp.0.bias"));
}

TEST_CASE("bf16_model_fp32_params: the tensors the bf16 model reads in fp32, by torchvision name", "[layout]") {
  // The list written out from the bf16 forward and backward (cuda/model/gpu_vit.cu: every
  // parameter passed to a kernel without the bf16 working copy, W()): LayerNorms, the biases of
  // the GEMMs that write the fp32 residual stream, the tokens and the fp32 head.
  const ParamLayout L = make_param_layout(vit_config("vit_b_16"));
  std::vector<std::string> want = {"class_token", "conv_proj.bias", "encoder.pos_embedding"};
  for (int l = 0; l < L.cfg.layers; ++l) {
    const std::string b = "encoder.layers.encoder_layer_" + std::to_string(l) + ".";
    for (const char* t : {"ln_1.weight", "ln_1.bias", "self_attention.out_proj.bias", "ln_2.weight", "ln_2.bias",
                          "mlp.3.bias"})
      want.push_back(b + t);
  }
  for (const char* t : {"encoder.ln.weight", "encoder.ln.bias", "heads.head.weight", "heads.head.bias"}) want.push_back(t);
  std::vector<std::string> got;
  size_t last = 0;
  for (const ParamRef& r : bf16_model_fp32_params(L)) {
    got.push_back(L.params.at(r.index).name);
    CHECK(r.offset == L.params[r.index].offset);
    CHECK(r.numel == L.params[r.index].numel);
    CHECK((got.size() == 1 || r.index > last));  // registration order
    last = r.index;
  }
  std::sort(want.begin(), want.end());
  std::sort(got.begin(), got.end());
  CHECK(got == want);
  CHECK(got.size() == 3 + 6 * 12 + 4);
}
