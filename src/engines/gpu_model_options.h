// The GpuViT settings the GPU engine derives from a run's options: one function, used by the
// engine when it builds the model and by the memory estimate (src/engines/memory_estimate.h) and the
// results header, so they cannot disagree.
#pragma once
#include "model/gpu_vit_options.h"
#include "model/param_layout.h"
#include "src/app/options.h"

namespace vitddp {

/// GpuViTOptions for `o` on `layout`:
///  - precision from --precision; attention / patch embedding from --attention / --patch-embed
///    (auto resolved by model/kernel_choice.h, with the model's head dimension); recompute_gelu
///    from --recompute-gelu (auto: model/kernel_choice.h, and only where the arena plan
///    (cuda/model/gpu_vit_arena.h) is then smaller: not at batches of a few images, where the
///    overlaid gradients set the blocks' spacing);
///  - refresh_bf16_weights = false: the engine keeps the bf16 weight copy current itself (cast
///    once at set-up, then written by the optimizer's pass);
///  - overlay_gradients when there is no gradient accumulation and the layout has no padding: the
///    gradients live only from backward to the optimizer step, in memory of dead activations;
///  - with --checkpoint-every or --resume: gemm_autotune_candidates = 0 and deterministic, so a
///    resumed run repeats the uninterrupted one bit for bit (timing-based cuBLASLt choices may
///    differ between processes; cuDNN's default attention backward is not bit-reproducible).
/// Throws std::invalid_argument for a precision / kernel choice combination that cannot run, and
/// in the CPU-only build (src/engines/gpu_backend_off.cpp).
GpuViTOptions gpu_model_options(const Options& o, const ParamLayout& layout);

}  // namespace vitddp
