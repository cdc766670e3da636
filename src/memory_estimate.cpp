#include "src/memory_estimate.h"

#include "src/gpu_model_options.h"
#include "src/optimizer.h"

#include <cstdint>
#include <cstdio>

#include "cuda/gpu_vit.h"
#include "cuda/gpu_vit_arena.h"
#include "cuda/precision.h"
#include "mpi/reducer.h"

namespace vitddp {

size_t MemoryEstimate::persistent_bytes() const {
  size_t n = 0;
  for (const auto& i : items) n += i.bytes;
  return n;
}

size_t MemoryEstimate::peak_bytes() const { return persistent_bytes() + transient.bytes; }

size_t MemoryEstimate::bytes_of(const std::string& what) const {
  for (const auto& i : items)
    if (i.what == what) return i.bytes;
  return transient.what == what ? transient.bytes : 0;
}

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
  e.items.push_back({"parameters", "fp32 master weights, " + std::to_string(n) + " elements", n * f32});
  // The model settings GpuEngine uses. Without gradient accumulation the gradients live inside the
  // activation arena (overlay_gradients), sharing memory with activations backward is done with.
  const GpuViTOptions vo = gpu_model_options(o, layout);
  const bool overlay = vo.overlay_gradients;
  e.items.push_back({"gradients", overlay ? "fp32, the DDP buckets, inside the activation arena (overlaid on activations "
                                            "backward has finished with)"
                                          : "fp32, the DDP buckets (gradient_as_bucket_view)",
                     overlay ? 0 : n * f32});
  const std::vector<std::string> state = optimizer_state_names(optimizer_spec(o));
  std::string state_list;
  for (const auto& s : state) state_list += (state_list.empty() ? "" : ", ") + s;
  e.items.push_back({"optimizer state", state.empty() ? "none (SGD without momentum)" : "fp32 " + state_list,
                     state.size() * n * f32});
  const size_t images = (size_t)o.batch_size * c.channels * c.image_size * c.image_size;
  e.items.push_back({"inputs", "2 input slots of images and labels, loss per micro-step, non-finite flag",
                     2 * (images * f32 + (size_t)o.batch_size * sizeof(int32_t)) + (size_t)o.grad_accum_steps * f32 +
                         sizeof(int)});
  e.items.push_back({"cuBLASLt workspace", "scratch of the cuBLASLt GEMMs (split-K etc.)", GpuViT::workspace_bytes(vo)});
  const GpuViTArenaPlan plan = plan_gpu_vit_arena(c, n, o.batch_size, p, overlay, vo.attention, vo.patch_embed);
  std::string arena = "the activation arena: " + std::to_string(plan.slots.size()) + " buffers for batch " +
                      std::to_string(o.batch_size);
  if (plan.weights16_bytes) arena += ", including the bf16 parameter copy (" + gib(plan.weights16_bytes) + " GiB)";
  e.items.push_back({"activations", arena, plan.total_bytes});
  std::string reducer = "none";
  if (o.ddp) {
    reducer = o.grad_as_bucket_view ? "" : "bucket buffer (--grad-as-bucket-view off)";
    if (o.compression != Compression::None) reducer += std::string(reducer.empty() ? "" : ", ") + to_string(o.compression) + " buffers";
    if (uses_copy_engine(reducer_options(o), world_size))
      reducer += std::string(reducer.empty() ? "" : ", ") + "copy-engine scratch and flags";
    if (reducer.empty()) reducer = "no buffers (in-place all-reduce of the gradients)";
  }
  e.items.push_back({"reducer", reducer, o.ddp ? NcclReducer::planned_device_bytes(layout, buckets, reducer_options(o), world_size) : 0});
  e.transient = {"cuBLASLt autotuning", "largest GEMM output, allocated while timing each new shape in the tuning pass before training",
                 vo.gemm_autotune_candidates > 1 ? gpu_vit_autotune_scratch_bytes(c, o.batch_size, p) : 0};
  return e;
}

MemoryEstimate estimate_gpu_memory(const Options& o, int world_size) {
  const ParamLayout layout = make_param_layout(vit_config(o.model, o.num_classes));
  const std::vector<Bucket> buckets = assign_buckets(layout, (size_t)(o.first_bucket_mb * 1048576.0),
                                                     (size_t)(o.bucket_cap_mb * 1048576.0));
  return estimate_gpu_memory(o, layout, buckets, world_size);
}

std::string gib(size_t bytes) {
  char buf[32];
  const double g = bytes / 1073741824.0;
  if (bytes == 0) return "0";
  std::snprintf(buf, sizeof(buf), g >= 10 ? "%.1f" : "%.2f", g);
  return buf;
}

std::string memory_summary(const MemoryEstimate& e) {
  std::string s = e.model + " at batch " + std::to_string(e.batch) + ", " + e.precision + " needs " +
                  gib(e.peak_bytes()) + " GiB in all (";
  for (size_t i = 0; i < e.items.size(); ++i) s += (i ? ", " : "") + e.items[i].what + " " + gib(e.items[i].bytes);
  if (e.transient.bytes) s += ", " + e.transient.what + " " + gib(e.transient.bytes) + " while tuning";
  return s + "; GiB)";
}

std::string memory_report(const MemoryEstimate& e) {
  std::string s = "[vitddp] device memory per rank of the GPU backend: " + e.model + " (" +
                  std::to_string(e.parameter_count) + " parameters), batch " + std::to_string(e.batch) + ", " +
                  e.precision + "\n";
  char line[512];
  auto row = [&](const MemoryItem& i) {
    std::snprintf(line, sizeof(line), "  %-20s %15zu bytes %9s GiB  %s\n", i.what.c_str(), i.bytes, gib(i.bytes).c_str(),
                  i.detail.c_str());
    s += line;
  };
  for (const auto& i : e.items) row(i);
  row(e.transient);
  std::snprintf(line, sizeof(line), "  %-20s %15zu bytes %9s GiB  allocated while training (EngineInfo device_bytes)\n",
                "persistent", e.persistent_bytes(), gib(e.persistent_bytes()).c_str());
  s += line;
  std::snprintf(line, sizeof(line), "  %-20s %15zu bytes %9s GiB  the most at any time\n", "peak", e.peak_bytes(),
                gib(e.peak_bytes()).c_str());
  s += line;
  s += "  not counted: the CUDA context (about 0.5 GiB), NCCL's buffers, cudaMalloc's rounding to 2 MiB pages\n";
  return s;
}

std::string out_of_memory_message(const MemoryEstimate& e, size_t free_bytes, size_t total_bytes) {
  if (e.peak_bytes() <= free_bytes) return "";
  std::vector<MemoryItem> order = e.items;
  order.push_back(e.transient);
  size_t left = free_bytes;
  const MemoryItem* culprit = &order.back();
  for (const auto& i : order) {
    if (i.bytes > left) {
      culprit = &i;
      break;
    }
    left -= i.bytes;
  }
  return "out of GPU memory allocating " + culprit->what + " (" + gib(culprit->bytes) + " GiB): " + memory_summary(e) +
         " but cudaMemGetInfo reports " + gib(free_bytes) + " GiB free of " + gib(total_bytes) + " GiB";
}

}  // namespace vitddp
