// The parameter table of a ViT (torchvision state_dict names and shapes) and its flat layout.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "model/vit_config.h"

namespace vitddp {

/// One parameter tensor: torchvision name, shape, and its slice [offset, offset+numel) of the flat
/// buffer (in elements, not bytes).
struct ParamInfo {
  std::string name;              ///< e.g. "encoder.layers.encoder_layer_0.mlp.0.weight"
  std::vector<int64_t> shape;    ///< as torchvision's state_dict, e.g. {4096, 1024}
  size_t numel = 0;
  size_t offset = 0;             ///< element offset into the flat buffer
};

/// One parameter tensor of a layout, found by its torchvision name: its registration index (into
/// ParamLayout::params; the index GradReadyFn reports) and its slice [offset, offset+numel) of the
/// flat buffer, in elements.
struct ParamRef {
  size_t index = 0;
  size_t offset = 0;
  size_t numel = 0;
  /// The tensor inside a flat buffer of the layout (parameters, gradients or optimizer state).
  template <typename T>
  T* in(T* base) const {
    return base + offset;
  }
};

/// The 12 tensors of encoder block l ("encoder.layers.encoder_layer_l." + ln_1.weight, ln_1.bias,
/// self_attention.in_proj_weight, self_attention.in_proj_bias, self_attention.out_proj.weight,
/// self_attention.out_proj.bias, ln_2.weight, ln_2.bias, mlp.0.weight, mlp.0.bias, mlp.3.weight,
/// mlp.3.bias).
struct BlockParams {
  ParamRef ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc1_w, fc1_b, fc2_w, fc2_b;
  /// All 12, in registration order.
  std::vector<ParamRef> all() const {
    return {ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc1_w, fc1_b, fc2_w, fc2_b};
  }
};

/// Every tensor of a ViT by role: conv_proj.weight / .bias, class_token, encoder.pos_embedding,
/// the blocks, encoder.ln.weight / .bias, heads.head.weight / .bias.
struct ModelParams {
  ParamRef conv_w, conv_b, cls, pos;
  std::vector<BlockParams> blocks;  ///< [cfg.layers]
  ParamRef ln_w, ln_b, head_w, head_b;
};

struct ParamLayout;

/// The parameters the bf16 GpuViT (--precision bf16; cuda/model/gpu_vit.cu, forward_pass and
/// backward_pass) reads from the flat fp32 parameter buffer instead of its bf16 working copy, in
/// registration order: conv_proj.bias (the patch GEMM writes the fp32 embedding with it),
/// class_token and encoder.pos_embedding (the fp32 residual stream), per block ln_1.weight /
/// .bias and ln_2.weight / .bias (fp32 LayerNorm), self_attention.out_proj.bias and mlp.3.bias
/// (the GEMMs that add into the fp32 residual stream), and the fp32 head: encoder.ln.weight /
/// .bias, heads.head.weight / .bias. Every other tensor (conv_proj.weight, in_proj_weight /
/// in_proj_bias, out_proj.weight, mlp.0.weight / .bias, mlp.3.weight) is read only as bf16.
/// ZeRO-1's bf16 all-gather (--allgather-dtype bf16) refreshes exactly these in the fp32 buffer.
std::vector<ParamRef> bf16_model_fp32_params(const ParamLayout& layout);

/// The tensors GpuViT's backward updates in place when the SGD step is fused into it
/// (--optimizer-in-backward, WeightUpdate), in registration order: per block
/// self_attention.in_proj_weight, self_attention.out_proj.weight, mlp.0.weight and mlp.3.weight,
/// the weights of the weight-gradient GEMMs (vit_l_32: 302.0 M of its 306.5 M parameters). The
/// others' gradients are still written to the gradient buffer and updated after backward.
std::vector<ParamRef> weights_updated_in_backward(const ParamLayout& layout);

/// Looks every tensor of `layout.cfg` up by its torchvision name (ParamLayout::index_of); throws
/// std::out_of_range naming a missing one. make_param_layout stores the result in
/// ParamLayout::named.
ModelParams find_model_params(const ParamLayout& layout);

/// All parameters of a ViT in torchvision's registration order (params[i] is the i-th entry of
/// model.named_parameters()), laid out in one flat buffer in *gradient-ready* order: the last
/// registered tensor (heads.head.bias) sits at offset 0, the first (class_token) at the end, so that
/// the gradients produced first in backward form the first contiguous slices (DDP buckets).
/// Every tensor starts at a multiple of 4 elements (16 bytes) for vectorised kernels; for the
/// torchvision variants this adds no padding (total == sum of numel).
struct ParamLayout {
  ViTConfig cfg;
  std::vector<ParamInfo> params;  ///< registration order
  size_t total = 0;               ///< elements in the flat buffer, padding included
  ModelParams named;              ///< every tensor by role (find_model_params), the models' view of params

  /// Index of a parameter by torchvision name; throws std::out_of_range naming it.
  size_t index_of(const std::string& name) const;
  /// Sum of numel over all parameters (torchvision's parameter count; vit_l_32: 306,535,400).
  size_t parameter_count() const;
  /// Registration indices in gradient-ready order (reverse registration order), the order DDP
  /// (torch.nn.parallel.DistributedDataParallel, after its first-iteration rebuild) fills buckets.
  std::vector<size_t> ready_order() const;
};

/// Builds the table for a configuration. Names follow torchvision.models.vit_*:
/// class_token [1,1,D], conv_proj.weight [D,C,P,P], conv_proj.bias [D], encoder.pos_embedding
/// [1,T,D], per block i "encoder.layers.encoder_layer_i." + {ln_1.weight, ln_1.bias,
/// self_attention.in_proj_weight [3D,D], self_attention.in_proj_bias [3D],
/// self_attention.out_proj.weight [D,D], self_attention.out_proj.bias [D], ln_2.weight, ln_2.bias,
/// mlp.0.weight [M,D], mlp.0.bias [M], mlp.3.weight [D,M], mlp.3.bias [D]}, encoder.ln.weight,
/// encoder.ln.bias, heads.head.weight [K,D], heads.head.bias [K].
ParamLayout make_param_layout(const ViTConfig& cfg);

/// Typed pointers into a flat buffer (parameters, gradients or optimizer state share the layout).
template <typename T>
struct BlockTensors {
  T *ln1_w, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b, *ln2_w, *ln2_b, *fc1_w, *fc1_b, *fc2_w, *fc2_b;
};
template <typename T>
struct ViTTensors {
  T *class_token, *conv_w, *conv_b, *pos_embedding;
  std::vector<BlockTensors<T>> blocks;
  T *ln_w, *ln_b, *head_w, *head_b;
};

/// Binds the named pointers of `layout` (layout.named's offsets) to the flat buffer `base` (host
/// or device memory; no access is made). `base` must hold layout.total elements.
template <typename T>
ViTTensors<T> bind_tensors(const ParamLayout& layout, T* base);

}  // namespace vitddp
