// Which implementation runs the attention core (custom kernels, cuDNN or batched GEMMs) and the
// patch embedding (GEMM or cuDNN), and how the command line's auto|cudnn|custom|gemm and
// auto|cudnn|gemm names map to them.
#pragma once
#include <string>
#include <vector>

#include "model/precision.h"

namespace vitddp {

/// Attention core softmax(QK^T/sqrt(dh))V: custom = cuda/kernels/attention.h (fp32 and bf16, keeps the
/// probabilities; its tensor-core kernels, T <= 64 with head_dim 64 in bf16 and tf32, keep two
/// floats a query row instead), cudnn = cuda/kernels/cudnn_attention.h (cuDNN fused flash attention, bf16 only, keeps
/// the softmax log-sum-exp), gemm = cuda/kernels/attention_gemm.h (batched cuBLAS GEMMs and row
/// softmax kernels, fp32 activations only - fp32 and tf32 -, keeps the probabilities as custom),
/// gemm_recompute = the same products, but keeping no probabilities between forward and backward:
/// backward recomputes them (S = QK^T and the softmax again, bit for bit forward's) into one buffer
/// all blocks share, as activation checkpointing of the attention core would (the keep-nothing idea
/// of FlashAttention, Dao et al. 2022, without its fusion).
enum class AttentionImpl { custom, cudnn, gemm, gemm_recompute };

/// True for the batched-GEMM attention, keeping or recomputing its probabilities.
inline bool is_gemm_attention(AttentionImpl a) { return a == AttentionImpl::gemm || a == AttentionImpl::gemm_recompute; }

/// conv_proj: gemm = im2col + cuBLASLt GEMM (cuda/kernels/patch_embed.h), cudnn = cuDNN convolution
/// (cuda/kernels/cudnn_conv.h). Both run in every precision.
enum class PatchEmbedImpl { gemm, cudnn };

/// "custom" / "cudnn" / "gemm" / "gemm-recompute"; "gemm" / "cudnn".
const char* attention_impl_name(AttentionImpl a);
const char* patch_embed_impl_name(PatchEmbedImpl p);

/// Accepted option values: {"auto", "cudnn", "custom", "gemm", "gemm-recompute"} and {"auto", "cudnn", "gemm"}.
std::vector<std::string> attention_choice_names();
std::vector<std::string> patch_embed_choice_names();

/// "" when `name` (one of attention_choice_names()) can run in precision `p` on heads of
/// `head_dim` (0: not checked); otherwise one line saying why not (cudnn needs bf16: cuDNN's flash
/// attention has no fp32 form, and a head_dim cudnn_attention_supports, named with `model` when
/// given; gemm and gemm-recompute need fp32 or tf32: their products take fp32 activations).
std::string attention_choice_error(const std::string& name, Precision p, int head_dim = 0,
                                   const std::string& model = "");

/// "" when `name` (one of patch_embed_choice_names()) can run in precision `p`; otherwise one
/// line saying why not (cudnn in bf16: cuDNN 9.14's bf16 weight-gradient convolution of this
/// shape fails on the H200).
std::string patch_embed_choice_error(const std::string& name, Precision p);

/// The implementation a name selects in precision `p`. "auto" is the default chosen by
/// measurement (tests/gpu/bench_cudnn.cpp, [attention_bench], on an H200): attention auto =
/// custom in bf16 for the shapes of the tensor-core kernels (attention_mma_shape: T <= 64,
/// head_dim 64, e.g. vit_l_32: 0.78 vs 1.30 ms per step for cuDNN,
/// results/h200/kernels/attention-mma), cudnn for the other bf16 shapes cuDNN takes (1.6x faster
/// than the fp32-arithmetic custom kernels), custom otherwise; in fp32 and tf32, custom up to
/// kMmaMaxSeqLen tokens, any head_dim (and whenever seq_len is 0), and gemm for sequences longer than
/// kMmaMaxSeqLen (vit_b_16 tf32: the custom kernels' fp32 arithmetic made the step 8x slower than
/// JAX's, results/h200/kernels/attention-gemm); patch embedding auto = gemm (cuDNN's convolution
/// is 2.6-4.7x slower).
/// Throws std::invalid_argument for an unknown name or a combination attention_choice_error
/// rejects.
/// `head_dim`, `seq_len` (0 = unknown): auto falls back to custom for shapes cuDNN's flash
/// attention does not take (head_dim not a multiple of 8 or above 256, e.g. the test model
/// vit_micro). With seq_len 0, auto never picks the tensor-core kernels (cudnn in bf16 where
/// head_dim allows).
AttentionImpl resolve_attention(const std::string& name, Precision p, int head_dim = 0, int seq_len = 0);

/// The shapes of the tensor-core attention kernels (cuda/kernels/attention_mma.h): sequences up to
/// kMmaMaxSeqLen tokens (one 64 x 64 tile) and head dimension kMmaHeadDim.
constexpr int kMmaMaxSeqLen = 64;
constexpr int kMmaHeadDim = 64;

/// True when the tensor-core kernels take this shape: 1 <= T <= 64 and head_dim == 64 (no CUDA call).
inline bool attention_mma_shape(int T, int head_dim) { return T >= 1 && T <= kMmaMaxSeqLen && head_dim == kMmaHeadDim; }

/// True when cuDNN's fused attention runs head dimension `head_dim` (a multiple of 8, at most 256).
bool cudnn_attention_supports(int head_dim);
PatchEmbedImpl resolve_patch_embed(const std::string& name, Precision p);

/// Accepted --recompute-gelu values: {"auto", "on", "off"}.
std::vector<std::string> recompute_gelu_choice_names();

/// Whether GpuViT recomputes each block's GELU output in backward instead of keeping it
/// (GpuViTOptions::recompute_gelu) for `name` in precision `p`: "on" / "off"; "auto" = on in fp32
/// and tf32, where the kept outputs are 4-byte elements (vit_l_16 tf32 batch 32: 2.4 GB, which put
/// the peak above torch.compile's) and off in bf16, where the peak is below every peer's without it
/// (measured: docs/benchmarks.md); the trainer then also keeps auto off where it would save no
/// memory (src/engines/gpu_model_options.h). Throws std::invalid_argument for another name.
bool resolve_recompute_gelu(const std::string& name, Precision p);

}  // namespace vitddp
