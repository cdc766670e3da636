#include "model/kernel_choice.h"

#include <stdexcept>

namespace vitddp {

namespace {

/// "NAME: unknown value 'v' (choose one of: a, b, ...)" from the accepted names.
std::string unknown_value(const char* option, const std::string& v, const std::vector<std::string>& names) {
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
  return std::string(option) + ": unknown value '" + v + "' (choose one of: " + list + ")";
}

}  // namespace

const char* attention_impl_name(AttentionImpl a) {
  switch (a) {
    case AttentionImpl::cudnn: return "cudnn";
    case AttentionImpl::gemm: return "gemm";
    case AttentionImpl::gemm_recompute: return "gemm-recompute";
    case AttentionImpl::custom: break;
  }
  return "custom";
}

const char* patch_embed_impl_name(PatchEmbedImpl p) { return p == PatchEmbedImpl::cudnn ? "cudnn" : "gemm"; }

std::vector<std::string> attention_choice_names() { return {"auto", "cudnn", "custom", "gemm", "gemm-recompute"}; }

std::vector<std::string> patch_embed_choice_names() { return {"auto", "cudnn", "gemm"}; }

std::string patch_embed_choice_error(const std::string& name, Precision p) {
  if (name == "cudnn" && p == Precision::bf16)
    return "--patch-embed cudnn: not with --precision bf16 (cuDNN 9.14's bf16 weight-gradient convolution for this "
           "shape fails with CUDNN_STATUS_BAD_PARAM on the H200; it is also 2.6x slower than im2col + GEMM in fp32 "
           "and 4.7x in tf32): use --patch-embed gemm or auto";
  return "";
}

bool cudnn_attention_supports(int head_dim) { return head_dim > 0 && head_dim <= 256 && head_dim % 8 == 0; }

std::string attention_choice_error(const std::string& name, Precision p, int head_dim, const std::string& model) {
  if (name == "cudnn" && p != Precision::bf16)
    return std::string("--attention cudnn: needs --precision bf16 (cuDNN's fused flash attention takes bf16 "
                       "operands; got --precision ") +
           precision_name(p) + "): use --attention custom or auto";
  if (name == "cudnn" && head_dim != 0 && !cudnn_attention_supports(head_dim))
    return "--attention cudnn: " + (model.empty() ? std::string("the model") : model) + "'s heads have " +
           std::to_string(head_dim) +
           " dimensions; cuDNN's flash attention takes a multiple of 8 up to 256: use "
           "--attention custom or auto";
  if ((name == "gemm" || name == "gemm-recompute") && p == Precision::bf16)
    return "--attention " + name + ": needs --precision fp32 or tf32 (its batched GEMMs take fp32 activations; bf16 "
           "runs cudnn or custom): use --attention auto";
  return "";
}

AttentionImpl resolve_attention(const std::string& name, Precision p, int head_dim, int seq_len) {
  const std::string err = attention_choice_error(name, p, head_dim);
  if (!err.empty()) throw std::invalid_argument(err);
  if (name == "cudnn") return AttentionImpl::cudnn;
  if (name == "custom") return AttentionImpl::custom;
  if (name == "gemm") return AttentionImpl::gemm;
  if (name == "gemm-recompute") return AttentionImpl::gemm_recompute;
  // auto, measured on an H200 ([attention_bench], vit_l_32 batch 32, 24 layers, forward + backward):
  //  - the tensor-core custom kernels 0.78 ms per step against cuDNN's fused attention 1.30 ms,
  //    +4.9% steps/s end to end in bf16 (results/h200/kernels/attention-mma);
  //  - for the other shapes cuDNN: 1.31 ms against 2.11 ms for the fp32-arithmetic custom kernels,
  //    +6% end to end (docs/findings.md);
  //  - fp32/tf32 have no cuDNN path: beyond the tensor-core kernels' sequences they run as
  //    batched GEMMs (vit_b_16 tf32: the fp32-arithmetic custom kernels made the step 8x slower
  //    than JAX's; results/h200/kernels/attention-gemm).
  if (name == "auto") {
    if (p != Precision::bf16) return seq_len > kMmaMaxSeqLen ? AttentionImpl::gemm : AttentionImpl::custom;
    if (attention_mma_shape(seq_len, head_dim)) return AttentionImpl::custom;
    return head_dim == 0 || cudnn_attention_supports(head_dim) ? AttentionImpl::cudnn : AttentionImpl::custom;
  }
  throw std::invalid_argument(unknown_value("--attention", name, attention_choice_names()));
}

PatchEmbedImpl resolve_patch_embed(const std::string& name, Precision p) {
  const std::string err = patch_embed_choice_error(name, p);
  if (!err.empty()) throw std::invalid_argument(err);
  if (name == "cudnn") return PatchEmbedImpl::cudnn;
  // auto = gemm, measured on an H200 ([attention_bench], vit_l_32 batch 32, forward + weight
  // gradient): im2col + GEMM 0.48 / 0.15 / 0.09 ms against cuDNN 1.29 / 0.69 ms / failing in
  // fp32 / tf32 / bf16.
  if (name == "gemm" || name == "auto") return PatchEmbedImpl::gemm;
  throw std::invalid_argument(unknown_value("--patch-embed", name, patch_embed_choice_names()));
}

std::vector<std::string> recompute_gelu_choice_names() { return {"auto", "on", "off"}; }

bool resolve_recompute_gelu(const std::string& name, Precision p) {
  if (name == "on") return true;
  if (name == "off") return false;
  if (name == "auto") return p != Precision::bf16;
  throw std::invalid_argument(unknown_value("--recompute-gelu", name, recompute_gelu_choice_names()));
}

}  // namespace vitddp
