#include "cuda/kernel_choice.h"

#include <stdexcept>

namespace vitddp {

const char* attention_impl_name(AttentionImpl a) { return a == AttentionImpl::cudnn ? "cudnn" : "custom"; }

const char* patch_embed_impl_name(PatchEmbedImpl p) { return p == PatchEmbedImpl::cudnn ? "cudnn" : "gemm"; }

std::vector<std::string> attention_choice_names() { return {"auto", "cudnn", "custom"}; }

std::vector<std::string> patch_embed_choice_names() { return {"auto", "cudnn", "gemm"}; }

std::string attention_choice_error(const std::string& name, Precision p) {
  if (name == "cudnn" && p != Precision::bf16)
    return std::string("--attention cudnn: needs --precision bf16 (cuDNN's fused flash attention takes bf16 "
                       "operands; got --precision ") +
           precision_name(p) + "): use --attention custom or auto";
  return "";
}

AttentionImpl resolve_attention(const std::string& name, Precision p) {
  const std::string err = attention_choice_error(name, p);
  if (!err.empty()) throw std::invalid_argument(err);
  if (name == "cudnn") return AttentionImpl::cudnn;
  if (name == "custom" || name == "auto") return AttentionImpl::custom;  // auto: until measured
  throw std::invalid_argument("--attention: unknown value '" + name + "' (choose one of: auto, cudnn, custom)");
}

PatchEmbedImpl resolve_patch_embed(const std::string& name, Precision) {
  if (name == "cudnn") return PatchEmbedImpl::cudnn;
  if (name == "gemm" || name == "auto") return PatchEmbedImpl::gemm;  // auto: until measured
  throw std::invalid_argument("--patch-embed: unknown value '" + name + "' (choose one of: auto, cudnn, gemm)");
}

}  // namespace vitddp
