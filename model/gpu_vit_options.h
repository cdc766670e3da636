// The tuning knobs of the GPU model (GpuViT, cuda/model/gpu_vit.h), in a header without CUDA types so
// that the trainer, the results header and the memory estimate read them in every build.
#pragma once
#include "model/kernel_choice.h"
#include "model/precision.h"

namespace vitddp {

/// Tuning knobs of GpuViT (the defaults are what the trainer should use).
struct GpuViTOptions {
  /// Numeric precision (model/precision.h). fp32: strict fp32 (the default; bit-for-bit the
  /// original GpuViT). tf32: the same kernels, GEMMs with CUBLAS_COMPUTE_32F_FAST_TF32 and the attention core on
  /// TF32 tensor cores where cuda/kernels/attention_mma.h takes the shape (or, with attention = gemm,
  /// cuBLAS batched GEMMs of that compute type). bf16:
  /// autocast-style mixed precision, see GpuViT.
  Precision precision = Precision::fp32;
  /// cuBLASLt algorithm choice for each GEMM shape. 0: cuBLASLt's first heuristic choice (no
  /// synchronisation, the same algorithm in every process). n > 1: at the first use of each shape
  /// (the first forward/backward, and the first with a new batch size) time up to n candidates and
  /// keep the fastest: one stream synchronisation per new shape, about 2% faster on vit_l_32, but
  /// the choice (hence the last bits of the results) may differ between processes.
  int gemm_autotune_candidates = 16;
  /// true: the bias gradients of fc2 and out_proj are column sums taken by the LayerNorm backward
  /// that writes their output gradient, fc1's by the GELU backward (layernorm.h, gelu.h), in_proj's
  /// by the tensor-core attention backward where it runs (bf16 and tf32, T <= 64, head_dim 64, the
  /// custom attention: attention.h's dqkv_colsum), the others' by the weight-gradient GEMM's
  /// epilogue (cuBLASLt BGRADB) when backward overwrites.
  /// false, and the other layers when accumulating: a separate deterministic column-sum kernel.
  bool fused_bias_grad = true;
  /// bf16 only: true = forward() first casts the fp32 parameters into the bf16 working copy
  /// (bf16_weights(), about 0.5 ms for vit_l_32); false = the caller keeps that copy current
  /// itself (e.g. an optimizer that writes fp32 and bf16 parameters in one pass).
  bool refresh_bf16_weights = true;
  /// true: the model also allocates the flat fp32 gradient buffer (gradients()) inside its
  /// activation memory - the gradients of block l share memory with the activations of blocks
  /// above l, dead by the time backward writes them - saving about the size of the gradients
  /// (1.2 GB for vit_l_32). Then the gradients hold valid values only from a backward to the next
  /// forward (which overwrites them): for training without gradient accumulation, where the
  /// optimizer consumes them in between. The caller passes gradients() to backward().
  bool overlay_gradients = false;
  /// Attention core: custom kernels (cuda/kernels/attention.h, every precision), cuDNN's fused flash
  /// attention (cuda/kernels/cudnn_attention.h, bf16 only: the constructor throws std::invalid_argument
  /// otherwise) or batched cuBLAS GEMMs (cuda/kernels/attention_gemm.h, fp32 activations only - fp32
  /// and tf32; the constructor throws std::invalid_argument in bf16). cudnn keeps [B, H, T] fp32
  /// softmax statistics per block instead of the [B, H, T, T] probabilities that custom and gemm keep
  /// (custom's tensor-core kernels, T <= 64 with head_dim 64 in bf16 and tf32: [B, H, T, 2] row
  /// statistics, attention_saved_floats); gemm_recompute keeps none (backward recomputes them into
  /// one buffer for all blocks).
  AttentionImpl attention = AttentionImpl::custom;
  /// true: no block keeps its GELU output g = GELU(u) [N, M] for backward (fc2's weight gradient
  /// reads it); forward writes it into one buffer shared by the blocks and backward's GELU pass,
  /// which reads u anyway, writes it there again, bit for bit, before fc2's weight gradient
  /// (gelu_backward_bias's y). Saves (layers - 1) x N x M operand elements (vit_l_16 tf32 batch
  /// 32: 2.4 GB) for one extra write of N x M per block, as torch.compile's partitioner
  /// recomputes cheap pointwise ops instead of saving them. The same loss and gradients. With
  /// overlay_gradients at batches of a few images, where a block's gradients outweigh its
  /// activations and so set the blocks' spacing, it saves nothing and costs the shared buffer
  /// (vit_b_32 tf32 batch 4: 2 MiB more; --dry-run gives the figure; --recompute-gelu auto
  /// leaves it off there).
  bool recompute_gelu = false;
  /// conv_proj: im2col + cuBLASLt GEMM (cuda/kernels/patch_embed.h) or cuDNN convolution
  /// (cuda/kernels/cudnn_conv.h; algorithms timed at set-up when gemm_autotune_candidates > 1).
  PatchEmbedImpl patch_embed = PatchEmbedImpl::gemm;
  /// Bit-reproducible runs (checkpoint / resume): cuDNN attention uses its deterministic
  /// backward (slower); pair with gemm_autotune_candidates = 0 so every process picks the same
  /// cuBLASLt algorithms.
  bool deterministic = false;
  /// SMs backward's GEMMs leave free (PyTorch's "SM carveout"): they are planned for the device's
  /// SM count minus this (cuBLASLt SM count target, LtGemm::set_sm_count_target), because a
  /// concurrent stream - NCCL's all-reduce kernels under data parallelism - holds those SMs while
  /// backward runs. 0 = plan for every SM. Forward always plans for every SM. The constructor
  /// throws std::invalid_argument when it is negative or leaves fewer than 1 SM.
  int backward_sm_carveout = 0;
  /// fp32 only: the nn.Linear and patch-embedding GEMMs run as 3xTF32 (three TF32 tensor-core products
  /// on the operands split into TF32 hi and lo halves, LtGemmOptions::tf32x3_scratch_bytes) instead
  /// of strict fp32 SIMT GEMMs; the attention core stays strict fp32. The constructor throws
  /// std::invalid_argument in tf32 and bf16.
  bool fp32_matmul_tf32x3 = false;

  /// The defaults with `p` as the precision.
  static GpuViTOptions for_precision(Precision p) {
    GpuViTOptions o;
    o.precision = p;
    return o;
  }
};

}  // namespace vitddp
