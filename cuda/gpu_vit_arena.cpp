#include "cuda/gpu_vit_arena.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "cuda/attention.h"
#include "cuda/layernorm.h"
#include "cuda/loss.h"
#include "cuda/reduce.h"

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

GpuViTArenaPlan plan_gpu_vit_arena(const ViTConfig& cfg, size_t param_total, int max_batch, Precision precision) {
  if (max_batch < 1) throw std::invalid_argument("plan_gpu_vit_arena: max_batch must be >= 1");
  GpuViTArenaPlan p;
  Planner a(p);
  const size_t B = max_batch, T = cfg.seq_len(), D = cfg.hidden, M = cfg.mlp_dim, H = cfg.heads,
               K = cfg.num_classes, Np = cfg.num_patches(), PD = cfg.patch_dim();
  const size_t N = B * T, f32 = 4, bf16 = 2;
  const bool half = precision == Precision::bf16;
  const size_t op = half ? bf16 : f32;  // GEMM-operand element size

  // The order of the original per-buffer allocations: fp32 activations, then the operand-typed ones.
  p.emb = a.add(B * Np * D, f32, "patch embeddings");
  for (int l = 0; l <= cfg.layers; ++l) p.x.push_back(a.add(N * D, f32, "residual stream x[" + std::to_string(l) + "]"));
  p.blocks.resize(cfg.layers);
  for (int l = 0; l < cfg.layers; ++l) {
    const std::string s = " of block " + std::to_string(l);
    GpuViTArenaPlan::Block& b = p.blocks[l];
    b.mean1 = a.add(N, f32, "ln_1 mean" + s);
    b.rstd1 = a.add(N, f32, "ln_1 rstd" + s);
    b.probs = a.add(B * H * T * T, f32, "attention probabilities" + s);
    b.xmid = a.add(N * D, f32, "post-attention residual" + s);
    b.mean2 = a.add(N, f32, "ln_2 mean" + s);
    b.rstd2 = a.add(N, f32, "ln_2 rstd" + s);
  }
  p.xf = a.add(B * D, f32, "final LayerNorm output (class tokens)");
  p.meanf = a.add(B, f32, "final LayerNorm mean");
  p.rstdf = a.add(B, f32, "final LayerNorm rstd");
  p.logits = a.add(B * K, f32, "logits");
  p.dlogits = a.add(B * K, f32, "logits gradient");
  p.dx = a.add(N * D, f32, "residual-stream gradient");
  p.dscores = a.add(attention_backward_scratch_floats(max_batch, (int)T, (int)H), f32, "attention score gradient");
  p.dxf = a.add(B * D, f32, "final LayerNorm output gradient");
  if (half) {
    p.weights16 = a.add(param_total, bf16, "bf16 copy of the parameters");
    p.weights16_bytes = p.slots.back().bytes;
  }
  p.patches = a.add(B * Np * PD, op, "patches");
  for (int l = 0; l < cfg.layers; ++l) {
    const std::string s = " of block " + std::to_string(l);
    GpuViTArenaPlan::Block& b = p.blocks[l];
    b.y1 = a.add(N * D, op, "ln_1 output" + s);
    b.qkv = a.add(N * 3 * D, op, "qkv" + s);
    b.attn = a.add(N * D, op, "attention output" + s);
    b.z = a.add(N * D, op, "ln_2 output" + s);
    b.u = a.add(N * M, op, "mlp.0 output" + s);
    b.g = a.add(N * M, op, "GELU output" + s);
  }
  p.dwide = a.add(N * std::max(M, 3 * D), op, "wide gradient scratch");
  p.dnarrow = a.add(N * D, op, "narrow gradient scratch");
  p.demb = a.add(B * Np * D, op, "patch embedding gradient");
  if (half) p.dx16 = a.add(N * D, bf16, "residual-stream gradient (bf16 copy)");

  const int Ni = (int)N, Di = (int)D, Mi = (int)M, Ki = (int)K;
  size_t r = 0;
  r = std::max(r, layernorm_backward_scratch_floats(Ni, Di));
  r = std::max(r, layernorm_backward_scratch_floats(max_batch, Di));
  r = std::max(r, column_sum_scratch_floats(Ni, std::max({Di, Mi, 3 * Di})));
  r = std::max(r, column_sum_scratch_floats(max_batch * (int)Np, Di));
  r = std::max(r, column_sum_scratch_floats(max_batch, Ki));
  r = std::max(r, softmax_xent_scratch_floats(max_batch));
  p.reduce_scratch_floats = r;
  p.reduce_scratch = a.add(r, f32, "reduction scratch");
  return p;
}

size_t gpu_vit_autotune_scratch_bytes(const ViTConfig& cfg, int max_batch, Precision precision) {
  const size_t B = max_batch, T = cfg.seq_len(), D = cfg.hidden, M = cfg.mlp_dim, K = cfg.num_classes,
               Np = cfg.num_patches(), PD = cfg.patch_dim();
  const size_t N = B * T, f32 = 4, op = precision == Precision::bf16 ? 2 : 4;
  // Output [rows, cols] and element size of every GEMM in forward_pass / backward_pass.
  const size_t outputs[] = {
      B * Np * D * f32, N * 3 * D * op, N * D * f32, N * M * op, N * D * f32, B * K * f32,  // forward
      K * D * f32, D * M * f32, M * D * f32, D * D * f32, 3 * D * D * f32, D * PD * f32,    // weight gradients
      B * D * f32, N * M * op, N * D * op,                                                  // input gradients
  };
  return *std::max_element(std::begin(outputs), std::end(outputs));
}

}  // namespace vitddp
