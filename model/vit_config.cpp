#include "model/vit_config.h"

#include <stdexcept>

namespace vitddp {
namespace {
ViTConfig make(const char* name, int image, int patch, int layers, int heads, int hidden, int mlp,
               int classes) {
  ViTConfig c;
  c.name = name;
  c.image_size = image;
  c.patch_size = patch;
  c.layers = layers;
  c.heads = heads;
  c.hidden = hidden;
  c.mlp_dim = mlp;
  c.num_classes = classes;
  return c;
}

std::vector<ViTConfig> variants() {
  return {
      make("vit_l_32", 224, 32, 24, 16, 1024, 4096, 1000),
      make("vit_b_32", 224, 32, 12, 12, 768, 3072, 1000),
      make("vit_l_16", 224, 16, 24, 16, 1024, 4096, 1000),
      make("vit_b_16", 224, 16, 12, 12, 768, 3072, 1000),
      make("vit_h_14", 224, 14, 32, 16, 1280, 5120, 1000),
      make("vit_tiny", 32, 8, 4, 4, 64, 128, 10),
      make("vit_micro", 8, 4, 2, 2, 8, 16, 5),
      make("vit_fmnist", 28, 4, 6, 3, 192, 384, 10),
      make("vit_fmnist_cpu", 28, 7, 2, 2, 32, 64, 10),
  };
}
}  // namespace

ViTConfig vit_config(const std::string& name, int num_classes) {
  for (ViTConfig c : variants()) {
    if (c.name == name) {
      if (num_classes > 0) c.num_classes = num_classes;
      return c;
    }
  }
  std::string known;
  for (const auto& n : vit_variant_names()) known += (known.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown model '" + name + "' (known: " + known + ")");
}

std::vector<std::string> vit_variant_names() {
  std::vector<std::string> names;
  for (const auto& c : variants()) names.push_back(c.name);
  return names;
}

double forward_flops_per_image(const ViTConfig& c) {
  const double T = c.seq_len(), D = c.hidden, M = c.mlp_dim, P = c.num_patches();
  const double patch = 2.0 * P * c.patch_dim() * D;
  const double per_layer = 2.0 * T * D * 3 * D   // QKV projection
                           + 2.0 * T * T * D     // scores Q K^T (all heads)
                           + 2.0 * T * T * D     // attention-weighted values
                           + 2.0 * T * D * D     // out-projection
                           + 2.0 * T * D * M * 2;  // MLP up + down
  const double head = 2.0 * D * c.num_classes;
  return patch + c.layers * per_layer + head;
}

}  // namespace vitddp
