// The GPU memory estimate (src/engines/memory_estimate.h): the sizes come from the GPU model's and the
// GPU reducer's own planning functions (cuda/model/gpu_vit_arena.h, GpuReducer::planned_device_bytes),
// so this part is built with the GPU backend only.
#include "src/engines/memory_estimate.h"

#include "src/engines/gpu_model_options.h"
#include "src/engines/optimizer.h"

#include <cstdint>
#include <cstdio>

#include "cuda/model/gpu_vit.h"
#include "cuda/model/gpu_vit_arena.h"
#include "src/engines/backward_update_gpu.h"
#include "model/precision.h"
#include "mpi/buckets/shard_plan.h"
#include "mpi/reducer/gpu_reducer_gpu.h"

namespace vitddp {

MemoryEstimate estimate_gpu_memory(const Options& o, const ParamLayout& layout, const std::vector<Bucket>& buckets,
                                   int world_size) {
  const Precision p = o.precision;
  const ViTConfig& c = layout.cfg;
  const size_t n = layout.total, f32 = sizeof(float);
  MemoryEstimate e;
  e.model = c.name;
  e.parameter_count = layout.parameter_count();
  e.batch = o.batch_size;
  e.precision = precision_name(p);
  // The order of GpuEngine::allocate, then GpuViT (workspace, arena), then the reducer.
  const bool bf16_gather = allgather_in_bf16(o, world_size);
  e.items.push_back({"parameters", bf16_gather ? "fp32, the model's (only those it reads in fp32 are refreshed), " +
                                                     std::to_string(n) + " elements"
                                               : "fp32 master weights, " + std::to_string(n) + " elements",
                     n * f32});
  if (bf16_gather) {  // --allgather-dtype bf16: the masters of this rank's shard only (ZeRO-1)
    const size_t m = ShardPlan(buckets, world_size, 0).slot_numel();
    e.items.push_back({"master shard", "fp32 master weights of this rank's shard (bf16 all-gather), " +
                                           std::to_string(m) + " of " + std::to_string(n) + " elements",
                       m * f32});
  }
  // The model settings GpuEngine uses. Without gradient accumulation the gradients live inside the
  // activation arena (overlay_gradients), sharing memory with activations backward is done with.
  const GpuViTOptions vo = gpu_model_options(o, layout);
  const bool overlay = vo.overlay_gradients;
  e.items.push_back({"gradients", overlay ? "fp32, the DDP buckets, inside the activation arena (overlaid on activations "
                                            "backward has finished with)"
                                          : "fp32, the DDP buckets (gradient_as_bucket_view)",
                     overlay ? 0 : n * f32});
  e.items.push_back(optimizer_memory(o, layout, buckets, world_size));
  const size_t images = (size_t)o.batch_size * c.channels * c.image_size * c.image_size;
  e.items.push_back({"inputs", "2 input slots of images and labels, loss per micro-step, non-finite flag",
                     2 * (images * f32 + (size_t)o.batch_size * sizeof(int32_t)) + (size_t)o.grad_accum_steps * f32 +
                         sizeof(int)});
  e.items.push_back({"cuBLASLt workspace", "scratch of the cuBLASLt GEMMs (split-K etc.)", GpuViT::workspace_bytes(vo)});
  if (vo.fp32_matmul_tf32x3)
    e.items.push_back({"3xTF32 operand split",
                       "TF32 hi and lo halves of the largest GEMM's two operands (--fp32-matmul tf32x3)",
                       gpu_vit_tf32x3_scratch_bytes(c, o.batch_size)});
  const GpuViTArenaPlan plan =
      plan_gpu_vit_arena(c, n, o.batch_size, p, overlay, vo.attention, vo.patch_embed, vo.recompute_gelu);
  std::string arena = "the activation arena: " + std::to_string(plan.slots.size()) + " buffers for batch " +
                      std::to_string(o.batch_size);
  if (plan.weights16_bytes) arena += ", including the bf16 parameter copy (" + gib(plan.weights16_bytes) + " GiB)";
  if (vo.recompute_gelu) arena += "; GELU outputs recomputed in backward, one buffer for all blocks";
  e.items.push_back({"activations", arena, plan.total_bytes});
  if (o.optimizer_in_backward)
    e.items.push_back({"SGD in backward",
                       "the weight-gradient GEMMs' alpha and beta, the map of the weights they update",
                       backward_update_map_bytes(layout)});
  const size_t reducer_bytes = o.ddp ? GpuReducer::planned_device_bytes(layout, buckets, reducer_options(o), world_size) : 0;
  std::string reducer = "none";
  if (o.ddp) {
    reducer = o.grad_as_bucket_view ? "" : "bucket buffer (--grad-as-bucket-view off)";
    if (o.compression != Compression::None) reducer += std::string(reducer.empty() ? "" : ", ") + to_string(o.compression) + " buffers";
    if (uses_copy_engine(reducer_options(o), world_size))
      reducer += std::string(reducer.empty() ? "" : ", ") + "copy-engine scratch and flags";
    else if (o.shard_optimizer && reducer_bytes > 0)  // the only buffer of a sharded NCCL reducer
      reducer += std::string(reducer.empty() ? "" : ", ") +
                 "ZeRO-1's padded copy of the largest bucket that does not divide by the ranks";
    if (reducer.empty())
      reducer = o.shard_optimizer ? "no buffers (in-place reduce-scatter of the gradients and all-gather of the parameters)"
                                  : "no buffers (in-place all-reduce of the gradients)";
  }
  e.items.push_back({"reducer", reducer, reducer_bytes});
  // Autotuning times candidates on each GEMM's own output, except the weight gradients that
  // gradient accumulation adds in place and the weights --optimizer-in-backward updates in place.
  const size_t tuning = vo.gemm_autotune_candidates > 1
                            ? gpu_vit_autotune_scratch_bytes(c, o.grad_accum_steps > 1, o.optimizer_in_backward)
                            : 0;
  const char* why =
      !tuning ? (vo.gemm_autotune_candidates > 1
                     ? "none (candidates are timed on each GEMM's own output)"
                     : "none (no autotuning: --gemm-autotune 0 or 1, --checkpoint-every or --resume)")
      : o.optimizer_in_backward
          ? "largest weight updated in place, allocated while timing its GEMM before the first step"
          : "largest weight gradient accumulated in place, allocated while timing its GEMM in the first steps";
  e.transient = {"cuBLASLt autotuning", why, tuning};
  return e;
}

MemoryEstimate estimate_gpu_memory(const Options& o, int world_size) {
  const ParamLayout layout = make_param_layout(vit_config(o.model, o.num_classes));
  const std::vector<Bucket> buckets = run_buckets(o, layout);
  return estimate_gpu_memory(o, layout, buckets, world_size);
}

}  // namespace vitddp
