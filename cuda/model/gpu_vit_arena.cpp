#include "cuda/model/gpu_vit_arena.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "cuda/kernels/attention.h"
#include "cuda/kernels/attention_gemm.h"
#include "cuda/kernels/cudnn_attention.h"
#include "cuda/kernels/gelu.h"
#include "cuda/kernels/layernorm.h"
#include "cuda/kernels/loss.h"
#include "cuda/kernels/lt_gemm.h"
#include "cuda/kernels/reduce.h"
#include "model/param_layout.h"

namespace vitddp {
namespace {

/// Appends buffers to a plan, each at the next kArenaAlign boundary.
class Planner {
 public:
  explicit Planner(GpuViTArenaPlan& p) : p_(p) {}
  /// Reserves max(count, 1) elements of `elem_bytes` bytes; returns the byte offset.
  size_t add(size_t count, size_t elem_bytes, const std::string& name) {
    const size_t offset = (p_.total_bytes + kArenaAlign - 1) / kArenaAlign * kArenaAlign;
    const size_t bytes = std::max<size_t>(count, 1) * elem_bytes;
    p_.slots.push_back(ArenaSlot{name, offset, bytes});
    p_.total_bytes = offset + bytes;
    return offset;
  }

 private:
  GpuViTArenaPlan& p_;
};

}  // namespace

namespace {

/// One block's probs slot: cuDNN's softmax statistics [B, H, T], the gemm attention's row-padded
/// probabilities, the custom kernels' attention_saved_floats (row statistics [B, H, T, 2] on the
/// tensor-core kernels, else [B, H, T, T] probabilities); 0 floats (no slot) for gemm_recompute.
struct SavedSoftmax {
  size_t floats;
  const char* name;
};
SavedSoftmax saved_softmax(AttentionImpl attention, const ViTConfig& cfg, size_t B, Precision precision) {
  const int b = (int)B, T = cfg.seq_len(), H = cfg.heads;
  if (attention == AttentionImpl::cudnn) return {CudnnAttention::stats_floats(b, T, H), "attention softmax statistics"};
  if (attention == AttentionImpl::gemm) return {GemmAttention::probs_floats(b, T, H), "attention probabilities"};
  if (attention == AttentionImpl::gemm_recompute) return {0, "attention probabilities"};
  return {attention_saved_floats(b, T, H, cfg.head_dim(), precision),
          attention_saves_stats(T, cfg.head_dim(), precision) ? "attention softmax statistics" : "attention probabilities"};
}

/// Byte offsets of one encoder block's buffers relative to the block's start (its input x[l]
/// first, then everything backward reads of it); returns the block's bytes (aligned).
size_t plan_block(const ViTConfig& cfg, size_t B, size_t op, const SavedSoftmax& saved, bool recompute_gelu,
                  GpuViTArenaPlan::Block& b, size_t& x_in) {
  const size_t T = cfg.seq_len(), D = cfg.hidden, M = cfg.mlp_dim, H = cfg.heads, N = B * T, f32 = 4;
  size_t off = 0;
  auto take = [&](size_t count, size_t elem) {
    const size_t o = (off + kArenaAlign - 1) / kArenaAlign * kArenaAlign;
    off = o + std::max<size_t>(count, 1) * elem;
    return o;
  };
  x_in = take(N * D, f32);
  b.y1 = take(N * D, op);
  b.mean1 = take(N, f32);
  b.rstd1 = take(N, f32);
  b.qkv = take(N * 3 * D, op);
  b.probs = saved.floats > 0 ? take(saved.floats, f32) : GpuViTArenaPlan::npos;
  b.attn = take(N * D, op);
  b.xmid = take(N * D, f32);
  b.z = take(N * D, op);
  b.mean2 = take(N, f32);
  b.rstd2 = take(N, f32);
  b.u = take(N * M, op);
  b.g = recompute_gelu ? GpuViTArenaPlan::npos : take(N * M, op);
  return (off + kArenaAlign - 1) / kArenaAlign * kArenaAlign;
}

/// Shifts every offset of a block plan by `base`.
void shift(GpuViTArenaPlan::Block& b, size_t base) {
  for (size_t* o : {&b.y1, &b.qkv, &b.attn, &b.z, &b.u, &b.g, &b.mean1, &b.rstd1, &b.probs, &b.xmid, &b.mean2, &b.rstd2})
    if (*o != GpuViTArenaPlan::npos) *o += base;
}

/// Floats of the reduction scratch: the largest any one of the model's reductions needs (LayerNorm
/// backward, column sums, GELU backward with bias, the tensor-core attention backward's per-batch-item
/// column sums of dqkv [max_batch, 3D], the gemm attention's pointer arrays, the loss); `half`: bf16
/// activations.
size_t reduction_scratch_floats(const ViTConfig& cfg, int max_batch, AttentionImpl attention, bool half) {
  const int N = max_batch * cfg.seq_len(), D = cfg.hidden, M = cfg.mlp_dim, K = cfg.num_classes;
  size_t r = 0;
  r = std::max(r, layernorm_backward_scratch_floats(N, D));
  r = std::max(r, layernorm_backward_scratch_floats(max_batch, D));
  r = std::max(r, column_sum_scratch_floats(N, std::max({D, M, 3 * D})));
  r = std::max(r, gelu_backward_bias_scratch_floats(N, M, half));
  r = std::max(r, column_sum_scratch_floats(max_batch * cfg.num_patches(), D));
  r = std::max(r, column_sum_scratch_floats(max_batch, K));
  r = std::max(r, (size_t)max_batch * 3 * D);
  if (is_gemm_attention(attention)) r = std::max(r, GemmAttention::pointer_scratch_floats(max_batch, cfg.heads));
  return std::max(r, softmax_xent_scratch_floats(max_batch));
}

/// The buffers outside the encoder blocks, in arena order (the reduction scratch last).
void plan_outside_blocks(const ViTConfig& cfg, size_t param_total, int max_batch, Precision precision,
                         AttentionImpl attention, PatchEmbedImpl patch_embed, bool recompute_gelu, GpuViTArenaPlan& p,
                         Planner& a) {
  const size_t B = max_batch, T = cfg.seq_len(), D = cfg.hidden, M = cfg.mlp_dim, H = cfg.heads,
               K = cfg.num_classes, Np = cfg.num_patches(), PD = cfg.patch_dim();
  const size_t N = B * T, f32 = 4, bf16 = 2;
  const bool half = precision == Precision::bf16;
  const size_t op = dtype_bytes(operand_dtype(precision));  // GEMM-operand element size
  const int L = cfg.layers;
  p.emb = a.add(B * Np * D, f32, "patch embeddings");
  p.x.assign(L + 1, 0);
  p.x[L] = a.add(N * D, f32, "residual stream x[" + std::to_string(L) + "]");
  p.xf = a.add(B * D, f32, "final LayerNorm output (class tokens)");
  p.meanf = a.add(B, f32, "final LayerNorm mean");
  p.rstdf = a.add(B, f32, "final LayerNorm rstd");
  p.logits = a.add(B * K, f32, "logits");
  p.dlogits = a.add(B * K, f32, "logits gradient");
  p.dx = a.add(N * D, f32, "residual-stream gradient");
  const size_t dscores = attention == AttentionImpl::cudnn ? 0
                         : is_gemm_attention(attention)
                             ? GemmAttention::dscores_floats(max_batch, (int)T, (int)H)
                             : attention_backward_scratch_floats(max_batch, (int)T, (int)H, cfg.head_dim());
  p.dscores = dscores > 0 ? a.add(dscores, f32, "attention score gradient") : GpuViTArenaPlan::npos;
  if (attention == AttentionImpl::gemm_recompute)
    p.attn_probs = a.add(GemmAttention::probs_floats(max_batch, (int)T, (int)H), f32,
                         "attention probabilities (every block's, recomputed in backward)");
  if (recompute_gelu) p.gelu_out = a.add(N * M, op, "GELU output (every block's, recomputed in backward)");
  p.dxf = a.add(B * D, f32, "final LayerNorm output gradient");
  if (half) {
    p.weights16 = a.add(param_total, bf16, "bf16 copy of the parameters");
    p.weights16_bytes = p.slots.back().bytes;
  }
  p.patches = patch_embed == PatchEmbedImpl::cudnn ? GpuViTArenaPlan::npos : a.add(B * Np * PD, op, "patches");
  p.dwide = a.add(N * std::max(M, 3 * D), op, "wide gradient scratch");
  p.dnarrow = a.add(N * D, op, "narrow gradient scratch");
  p.demb = a.add(B * Np * D, op, "patch embedding gradient");
  if (half) p.dx16 = a.add(N * D, bf16, "residual-stream gradient (bf16 copy)");
  p.reduce_scratch_floats = reduction_scratch_floats(cfg, max_batch, attention, half);
  p.reduce_scratch = a.add(p.reduce_scratch_floats, f32, "reduction scratch");
}

/// Each block's start in the block region (bytes from the region's start) and the region's size.
/// With the gradient overlay the flat gradient buffer starts the region and block m sits above
/// the end of the gradients of blocks m..L-1 (written while block m is still to be read: the flat
/// layout is in gradient-ready order, block L-1 lowest), so it shares memory only with the
/// gradients of blocks < m and of the patch embedding, written after block m's backward.
std::vector<size_t> block_starts(const ViTConfig& cfg, size_t param_total, size_t per_block, bool overlay_gradients,
                                 size_t& region) {
  const int L = cfg.layers;
  const size_t f32 = 4;
  std::vector<size_t> start(L);
  if (!overlay_gradients) {
    for (int m = 0; m < L; ++m) start[m] = (size_t)m * per_block;
    region = (size_t)L * per_block;
    return start;
  }
  const ParamLayout layout = make_param_layout(cfg);
  if (layout.total != param_total || layout.total != layout.parameter_count())
    throw std::invalid_argument("plan_gpu_vit_arena: the gradient overlay needs " + cfg.name +
                                "'s own layout without padding");
  size_t prev_end = 0;
  for (int m = L - 1; m >= 0; --m) {
    size_t grad_end = 0;  // the end of block m's parameters (layout.named, found by name)
    for (const ParamRef& r : layout.named.blocks[m].all()) grad_end = std::max(grad_end, (r.offset + r.numel) * f32);
    start[m] = (std::max(prev_end, grad_end) + kArenaAlign - 1) / kArenaAlign * kArenaAlign;
    prev_end = start[m] + per_block;
  }
  region = std::max(prev_end, (param_total * f32 + kArenaAlign - 1) / kArenaAlign * kArenaAlign);
  return start;
}

/// The slots of block m's buffers (names end in " of block m"), whose offsets are final.
void add_block_slots(GpuViTArenaPlan& p, int m, const ViTConfig& cfg, size_t B, size_t op, const SavedSoftmax& saved) {
  const size_t N = B * cfg.seq_len(), D = cfg.hidden, M = cfg.mlp_dim, f32 = 4, nd = N * D * f32;
  const GpuViTArenaPlan::Block& b = p.blocks[m];
  const std::pair<const char*, std::pair<size_t, size_t>> bufs[] = {
      {"residual stream x[l]", {p.x[m], nd}}, {"ln_1 output", {b.y1, N * D * op}},
      {"ln_1 mean", {b.mean1, N * f32}},     {"ln_1 rstd", {b.rstd1, N * f32}},
      {"qkv", {b.qkv, N * 3 * D * op}},       {saved.name, {b.probs, saved.floats * f32}},
      {"attention output", {b.attn, N * D * op}}, {"post-attention residual", {b.xmid, nd}},
      {"ln_2 output", {b.z, N * D * op}},     {"ln_2 mean", {b.mean2, N * f32}},
      {"ln_2 rstd", {b.rstd2, N * f32}},      {"mlp.0 output", {b.u, N * M * op}},
      {"GELU output", {b.g, N * M * op}}};
  const std::string s = " of block " + std::to_string(m);
  for (const auto& [name, ob] : bufs)
    if (ob.first != GpuViTArenaPlan::npos) p.slots.push_back(ArenaSlot{std::string(name) + s, ob.first, ob.second});
}

}  // namespace

GpuViTArenaPlan plan_gpu_vit_arena(const ViTConfig& cfg, size_t param_total, int max_batch, Precision precision,
                                   bool overlay_gradients, AttentionImpl attention, PatchEmbedImpl patch_embed,
                                   bool recompute_gelu) {
  if (max_batch < 1) throw std::invalid_argument("plan_gpu_vit_arena: max_batch must be >= 1");
  GpuViTArenaPlan p;
  Planner a(p);
  plan_outside_blocks(cfg, param_total, max_batch, precision, attention, patch_embed, recompute_gelu, p, a);
  // The encoder blocks, each in one contiguous piece of the block region, which follows the other
  // buffers; one slot per block buffer (and one for the overlaid gradients, which overlaps block
  // slots by design).
  const int L = cfg.layers;
  const size_t B = max_batch, op = dtype_bytes(operand_dtype(precision));
  p.blocks.resize(L);
  std::vector<size_t> x_rel(L);
  size_t per_block = 0, region = 0;
  const SavedSoftmax saved = saved_softmax(attention, cfg, B, precision);
  for (int l = 0; l < L; ++l) per_block = plan_block(cfg, B, op, saved, recompute_gelu, p.blocks[l], x_rel[l]);
  const std::vector<size_t> start = block_starts(cfg, param_total, per_block, overlay_gradients, region);
  const size_t base = (p.total_bytes + kArenaAlign - 1) / kArenaAlign * kArenaAlign;
  p.total_bytes = base + region;
  if (overlay_gradients) {
    p.gradients = base;
    p.slots.push_back(ArenaSlot{"gradients (overlaid on block activations)", base, param_total * 4});
  }
  for (int m = 0; m < L; ++m) {
    p.x[m] = base + start[m] + x_rel[m];
    shift(p.blocks[m], base + start[m]);
    add_block_slots(p, m, cfg, B, op, saved);
  }
  p.block_bytes = per_block;
  return p;
}

size_t gpu_vit_autotune_scratch_bytes(const ViTConfig& cfg, bool accumulate, bool update_in_backward) {
  const size_t D = cfg.hidden, M = cfg.mlp_dim, K = cfg.num_classes, PD = cfg.patch_dim(), f32 = 4;
  if (!accumulate) return update_in_backward ? std::max(D * M, 3 * D * D) * f32 : 0;  // fc1 / fc2, qkv
  // The weight gradients of backward_pass, fp32 [out, in]: head, fc1, fc2, out_proj, qkv, conv_proj.
  const size_t outputs[] = {K * D * f32, D * M * f32, M * D * f32, D * D * f32, 3 * D * D * f32, D * PD * f32};
  return *std::max_element(std::begin(outputs), std::end(outputs));
}

size_t gpu_vit_tf32x3_scratch_bytes(const ViTConfig& cfg, int max_batch) {
  const int D = cfg.hidden, M = cfg.mlp_dim, N = max_batch * cfg.seq_len();
  struct Linear {
    int rows, in, out;
  };
  const Linear linears[] = {{max_batch * cfg.num_patches(), cfg.patch_dim(), D},  // conv_proj (im2col GEMM)
                            {N, D, 3 * D},
                            {N, D, D},
                            {N, D, M},
                            {N, M, D},
                            {max_batch, D, cfg.num_classes}};
  size_t most = 0;
  for (const Linear& l : linears)  // forward, input gradient, weight gradient (m, n, k)
    most = std::max({most, tf32x3_scratch_bytes(l.rows, l.out, l.in), tf32x3_scratch_bytes(l.rows, l.in, l.out),
                     tf32x3_scratch_bytes(l.out, l.in, l.rows)});
  return most;
}

}  // namespace vitddp
