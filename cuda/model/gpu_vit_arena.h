// Where every activation buffer of GpuViT lives inside its one device allocation (the activation
// arena), computed without touching the GPU: GpuViT binds its pointers from this plan, and the
// memory estimate (src/engines/memory_estimate.h, --dry-run) sums the same plan, so the two cannot drift.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "model/kernel_choice.h"
#include "model/precision.h"
#include "model/vit_config.h"

namespace vitddp {

/// Byte alignment of every buffer in the arena: what cudaMalloc guarantees, so each buffer is as
/// aligned as if it had its own allocation (vector loads, cuBLASLt operand alignment).
constexpr size_t kArenaAlign = 256;

/// One buffer of the arena: a name for messages, its byte offset from the arena's start (a
/// multiple of kArenaAlign) and its size in bytes (at least one element, as DeviceArena did).
struct ArenaSlot {
  std::string name;
  size_t offset = 0;
  size_t bytes = 0;
};

/// Byte offsets into the arena of every GpuViT buffer (names as in cuda/model/gpu_vit.cu). Shapes for
/// B = max_batch, T = seq_len, N = B*T, D = hidden, M = mlp_dim, H = heads, K = num_classes,
/// Np = num_patches, PD = patch_dim. "op" buffers hold the GEMM-operand type (fp32 in fp32/tf32,
/// bf16 in bf16 mode); the rest are fp32.
struct GpuViTArenaPlan {
  /// Per encoder block l.
  struct Block {
    size_t y1, qkv, attn, z, u, g;                     ///< op: [N,D], [N,3D], [N,D], [N,D], [N,M], [N,M] (g: npos with recompute_gelu)
    size_t mean1, rstd1, probs, xmid, mean2, rstd2;    ///< fp32: [N], [N], probs (below), [N,D], [N], [N]
  };
  static constexpr size_t npos = static_cast<size_t>(-1);  ///< buffer absent in this configuration

  size_t emb = 0;                 ///< fp32 [B*Np, D] patch embeddings
  std::vector<size_t> x;          ///< fp32 [N, D] residual stream x[0..layers]
  std::vector<Block> blocks;
  size_t xf = 0, meanf = 0, rstdf = 0;   ///< fp32 [B, D], [B], [B] final LayerNorm (class tokens)
  size_t logits = 0, dlogits = 0;        ///< fp32 [B, K]
  size_t dx = 0;                         ///< fp32 [N, D] residual-stream gradient
  size_t dscores = 0;                    ///< fp32 attention_backward_scratch_floats (gemm: GemmAttention::dscores_floats); npos when 0 floats and with cuDNN attention
  size_t attn_probs = npos;              ///< gemm_recompute only: fp32 GemmAttention::probs_floats(B, T, H), shared by the blocks
  size_t gelu_out = npos;                ///< recompute_gelu only: op [N, M] GELU output, shared by the blocks
  size_t dxf = 0;                        ///< fp32 [B, D]
  size_t reduce_scratch = 0;             ///< fp32 [reduce_scratch_floats]
  size_t reduce_scratch_floats = 0;
  size_t weights16 = npos;               ///< bf16 only: [param_total] bf16 copy of the parameters
  size_t patches = 0;                    ///< op [B*Np, PD] im2col patches; npos with the cuDNN patch embedding
  size_t dwide = 0;                      ///< op [N, max(M, 3D)]
  size_t dnarrow = 0;                    ///< op [N, D]
  size_t demb = 0;                       ///< op [B*Np, D]
  size_t dx16 = npos;                    ///< bf16 only: [N, D] bf16 copy of dx (fp32: dx is the operand)
  size_t gradients = npos;               ///< with the overlay: fp32 [param_total] flat gradient buffer
  size_t block_bytes = 0;                ///< bytes of one encoder block's buffers (x[l] included)

  std::vector<ArenaSlot> slots;  ///< every buffer, in allocation order
  size_t total_bytes = 0;        ///< bytes of the one allocation (alignment padding included)
  size_t weights16_bytes = 0;    ///< of which the bf16 parameter copy (0 unless bf16)
};

/// The arena of GpuViT(layout with cfg and `param_total` flat elements, max_batch, precision).
/// Pure host arithmetic (no CUDA call); sizes of the kernels' scratch come from their own
/// *_scratch_floats functions. Each encoder block's buffers (its input x[l] included) are one
/// contiguous piece. overlay_gradients (GpuViTOptions::overlay_gradients): the flat fp32 gradient
/// buffer of make_param_layout(cfg) also lives in the arena (offset `gradients`), sharing memory
/// with the activations of blocks that backward has finished with when it writes them; the arena
/// then grows by much less than the gradients' size (vit_l_32 bf16 batch 32: about 0.1 GB instead
/// of 1.2 GB). Throws std::invalid_argument if max_batch < 1, or for the overlay when
/// param_total is not that layout's padding-free size.
/// The probs slot holds attention_saved_floats for attention = custom ([B, H, T, 2] row statistics
/// on the tensor-core kernels, T <= 64 and head_dim 64 in bf16 or tf32, whose backward needs no
/// score-gradient scratch either: dscores = npos; else [B, H, T, T] probabilities); attention = cudnn keeps
/// [B, H, T] softmax statistics (CudnnAttention::stats_floats) there and needs no score-gradient
/// scratch (dscores = npos); attention = gemm keeps row-padded probabilities and dS
/// (GemmAttention::probs_floats) and also puts its pointer arrays
/// (GemmAttention::pointer_scratch_floats) in the reduction scratch; attention = gemm_recompute
/// keeps no per-block probabilities (Block::probs = npos) and one probabilities buffer of the same
/// size for all blocks (attn_probs), plus gemm's dS and pointer scratch; patch_embed =
/// cudnn needs no im2col patches (patches = npos). recompute_gelu (GpuViTOptions::recompute_gelu):
/// no block keeps its GELU output (Block::g = npos); one [N, M] op buffer (gelu_out) holds the
/// block in hand's, written by forward and rewritten by backward.
GpuViTArenaPlan plan_gpu_vit_arena(const ViTConfig& cfg, size_t param_total, int max_batch, Precision precision,
                                   bool overlay_gradients = false, AttentionImpl attention = AttentionImpl::custom,
                                   PatchEmbedImpl patch_embed = PatchEmbedImpl::gemm, bool recompute_gelu = false);

/// Largest temporary output buffer cuBLASLt autotuning allocates (cuda/kernels/lt_gemm.cu, freed
/// after timing each new GEMM shape) over the GEMMs of GpuViT: bytes. The candidates write each
/// GEMM's own output unless it is also an input, which in GpuViT happens only for the weight
/// gradients accumulated in place (backward with accumulate, gradient accumulation) and the block
/// weights updated in place (`update_in_backward`, WeightUpdate, cuda/model/gpu_vit.h): so 0 when both are
/// false, else the largest such fp32 tensor. Only allocated when
/// GpuViTOptions::gemm_autotune_candidates > 1.
size_t gpu_vit_autotune_scratch_bytes(const ViTConfig& cfg, bool accumulate, bool update_in_backward = false);

/// Bytes of the 3xTF32 operand split (GpuViTOptions::fp32_matmul_tf32x3, LtGemmOptions::
/// tf32x3_scratch_bytes): the largest tf32x3_scratch_bytes (cuda/kernels/lt_gemm.h) over the
/// cuBLASLt GEMMs of GpuViT at max_batch images: forward, input gradient and weight gradient of
/// conv_proj (as im2col GEMM), in_proj, out_proj, mlp.0, mlp.3 and heads.head.
size_t gpu_vit_tf32x3_scratch_bytes(const ViTConfig& cfg, int max_batch);

}  // namespace vitddp
