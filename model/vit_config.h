// Vision Transformer hyper-parameters, as torchvision's VisionTransformer takes them.
#pragma once
#include <string>
#include <vector>

namespace vitddp {

/// Shape of a ViT (torchvision.models.vision_transformer.VisionTransformer arguments).
/// Images are [batch, channels, image_size, image_size] float32 (NCHW); the conv patch embedding
/// cuts them into (image_size/patch_size)^2 patches; a class token is prepended, so the encoder
/// sees seq_len() = num_patches() + 1 tokens of width `hidden`.
struct ViTConfig {
  std::string name;
  int image_size = 224;
  int patch_size = 32;
  int channels = 3;
  int layers = 24;
  int heads = 16;
  int hidden = 1024;
  int mlp_dim = 4096;
  int num_classes = 1000;
  double ln_eps = 1e-6;  ///< LayerNorm epsilon (torchvision: partial(nn.LayerNorm, eps=1e-6))

  int grid() const { return image_size / patch_size; }
  int num_patches() const { return grid() * grid(); }
  int seq_len() const { return num_patches() + 1; }
  int head_dim() const { return hidden / heads; }
  int patch_dim() const { return channels * patch_size * patch_size; }
};

/// Known variants: vit_b_32, vit_b_16, vit_l_32, vit_l_16, vit_h_14 (torchvision sizes, 1000
/// classes) and test sizes vit_tiny (32x32 images, 4 blocks of width 64) and vit_micro (2 blocks of
/// width 16, for finite differences). Two sizes for 28x28 Fashion-MNIST (10 classes, images taken
/// as they are: no resize; 3 channels, the grey image repeated, as torchvision's ViT):
///  - vit_fmnist: patch 4 (7x7 = 49 patches, 50 tokens), 6 blocks of width 192, 3 heads of 64,
///    MLP 384; 1.8 M parameters, about 0.19 GFLOP per image forward. The GPU accuracy run
///    (results/commands/device_fmnist.sh); inside the fast attention path (T <= 64, head_dim <= 64).
///  - vit_fmnist_cpu: patch 7 (4x4 = 16 patches, 17 tokens), 2 blocks of width 32, 2 heads, MLP
///    64; about 0.8 MFLOP per image, small enough for the CPU backend's accuracy test in CI.
/// `num_classes` overrides the class count when > 0.
/// Throws std::invalid_argument naming the variant when it is unknown.
ViTConfig vit_config(const std::string& name, int num_classes = 0);

/// Names accepted by vit_config, for --help and error messages.
std::vector<std::string> vit_variant_names();

/// Forward FLOPs of one image (multiply-add = 2 FLOPs): GEMMs of the patch embedding, encoder
/// (QKV, attention scores, attention-weighted values, out-projection, MLP) and head.
/// vit_l_32: about 30.8e9 (ANCHORS.md). A training step is counted as 3x the forward.
double forward_flops_per_image(const ViTConfig& cfg);

}  // namespace vitddp
