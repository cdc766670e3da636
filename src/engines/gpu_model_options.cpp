#include "src/engines/gpu_model_options.h"

#include "model/kernel_choice.h"
#include "model/precision.h"

namespace vitddp {

GpuViTOptions gpu_model_options(const Options& o, const ParamLayout& layout) {
  GpuViTOptions mo = GpuViTOptions::for_precision(o.precision);
  mo.refresh_bf16_weights = false;
  mo.attention = resolve_attention(to_string(o.attention), mo.precision, layout.cfg.head_dim(), layout.cfg.seq_len());
  mo.patch_embed = resolve_patch_embed(to_string(o.patch_embed), mo.precision);
  mo.recompute_gelu = resolve_recompute_gelu(to_string(o.recompute_gelu), mo.precision);
  mo.backward_sm_carveout = o.gemm_sm_carveout;
  mo.overlay_gradients = o.grad_accum_steps == 1 && layout.total == layout.parameter_count();
  if (o.checkpoint_every > 0 || !o.resume.empty()) {
    mo.gemm_autotune_candidates = 0;
    mo.deterministic = true;
  }
  return mo;
}

}  // namespace vitddp
