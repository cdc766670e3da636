#include "src/engines/gpu_model_options.h"

#include "cuda/model/gpu_vit_arena.h"
#include "model/kernel_choice.h"
#include "model/precision.h"

namespace vitddp {

GpuViTOptions gpu_model_options(const Options& o, const ParamLayout& layout) {
  GpuViTOptions mo = GpuViTOptions::for_precision(o.precision);
  mo.refresh_bf16_weights = false;
  mo.attention = resolve_attention(to_string(o.attention), mo.precision, layout.cfg.head_dim(), layout.cfg.seq_len());
  mo.patch_embed = resolve_patch_embed(to_string(o.patch_embed), mo.precision);
  mo.backward_sm_carveout = o.gemm_sm_carveout;
  mo.gemm_autotune_candidates = o.gemm_autotune;
  mo.fp32_matmul_tf32x3 = o.fp32_matmul == Fp32Matmul::Tf32x3;
  mo.overlay_gradients = o.grad_accum_steps == 1 && layout.total == layout.parameter_count();
  mo.recompute_gelu = resolve_recompute_gelu(to_string(o.recompute_gelu), mo.precision);
  if (mo.recompute_gelu && o.recompute_gelu == RecomputeChoice::Auto) {
    // auto only where it saves memory: at batches of a few images the overlaid gradients set the
    // blocks' spacing, and the shared GELU buffer would only add to the arena.
    auto arena = [&](bool recompute) {
      return plan_gpu_vit_arena(layout.cfg, layout.total, o.batch_size, mo.precision, mo.overlay_gradients,
                                mo.attention, mo.patch_embed, recompute)
          .total_bytes;
    };
    mo.recompute_gelu = arena(true) < arena(false);
  }
  if (o.checkpoint_every > 0 || !o.resume.empty()) {
    mo.gemm_autotune_candidates = 0;
    mo.deterministic = true;
  }
  return mo;
}

}  // namespace vitddp
