#include "src/engines/memory_estimate.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "model/precision.h"
#include "mpi/buckets/shard_plan.h"
#include "mpi/hooks/powersgd_host.h"
#include "mpi/reducer/reducer_options.h"
#include "src/data/data.h"
#include "src/engines/optimizer.h"

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
  if (e.transient.bytes) s += ", " + e.transient.what + " " + gib(e.transient.bytes) + " (transient)";
  return s + "; GiB)";
}

CpuViTMemory cpu_vit_memory(const ParamLayout& layout, int max_batch) {
  // The buffers of CpuViT<T>::Impl's constructor (model/cpu_vit.cpp), all double but the labels.
  const ViTConfig& c = layout.cfg;
  const size_t D = c.hidden, H = c.heads, M = c.mlp_dim, K = c.num_classes, S = c.seq_len(), NP = c.num_patches(),
               PD = c.patch_dim(), Ls = c.layers, B = max_batch, R = B * S, f64 = sizeof(double);
  CpuViTMemory m;
  m.weights = (layout.total + PD * D + D * K + Ls * (D * 3 * D + D * D + D * M + M * D)) * f64;
  const size_t per_block = 5 * R * D + 2 * R + 3 * R * D + B * H * S * S + 2 * R * M;  // ln_1, qkv, attn, o, ln_2, mlp
  m.activations = (B * NP * PD + R * D + Ls * per_block + 2 * B * D + B + 2 * B * K) * f64 + B * sizeof(int32_t);
  m.backward = (layout.total + 3 * R * D + R * M + 3 * R * D + B * K + B * D + S) * f64;
  return m;
}

namespace {

/// The CPU reducer's buffers (mpi/reducer/cpu_reducer.cpp): {persistent item, PowerSGD's scratch bytes}.
std::pair<MemoryItem, size_t> cpu_reducer_memory(const Options& o, const ParamLayout& layout,
                                                 const std::vector<Bucket>& buckets) {
  MemoryItem r{"reducer", "none", 0};
  if (!o.ddp) return {r, 0};
  const ReducerOptions ro = reducer_options(o);
  const std::vector<HookBucket> hb = hook_buckets(layout, buckets);
  std::string what;
  auto add = [&](const std::string& w, size_t bytes) {
    what += (what.empty() ? "" : ", ") + w;
    r.bytes += bytes;
  };
  if (!ro.grad_as_bucket_view) add("bucket buffer (--grad-as-bucket-view off)", layout.total * sizeof(float));
  size_t scratch = 0;
  if (o.compression == Compression::Fp16 || o.compression == Compression::Bf16) {
    size_t n = 0;
    for (const auto& b : hb) n += b.numel;
    add("16-bit staging per bucket", n * sizeof(uint16_t));
  } else if (o.compression == Compression::PowerSgd) {
    size_t n = 0;
    for (const auto& b : hb) {
      const PowerSgdBucketPlan p = make_powersgd_plan(b, ro.powersgd.rank, ro.powersgd.min_compression_rate);
      const size_t error = ro.powersgd.error_feedback ? p.numel : 0;
      n += error + p.p_numel + p.q_numel;
      scratch = std::max(scratch, (error + p.uncompressed_numel) * sizeof(float));
    }
    add(std::string("PowerSGD state (") + (ro.powersgd.error_feedback ? "error, " : "") + "P, Q per bucket)",
        n * sizeof(float));
  }
  if (what.empty())
    what = ro.shard_optimizer ? "no buffers (in-place reduce-scatter of the gradients and all-gather of the parameters)"
                              : "no buffers (in-place all-reduce of the gradients)";
  r.detail = what;
  return {r, scratch};
}

}  // namespace

MemoryItem optimizer_memory(const Options& o, const ParamLayout& layout, const std::vector<Bucket>& buckets,
                            int world_size) {
  const std::vector<std::string> state = optimizer_state_names(optimizer_spec(o));
  std::string list;
  for (const auto& s : state) list += (list.empty() ? "" : ", ") + s;
  const bool sharded = o.shard_optimizer && o.ddp;
  const size_t n = sharded ? ShardPlan(buckets, world_size, 0).slot_numel() : layout.total;
  const std::string of = sharded ? " of this rank's shard (ZeRO-1, " + std::to_string(n) + " of " +
                                       std::to_string(layout.total) + " elements on " + std::to_string(world_size) +
                                       " rank(s))"
                                 : "";
  return MemoryItem{"optimizer state", state.empty() ? "none (SGD without momentum)" : "fp32 " + list + of,
                    state.size() * n * sizeof(float)};
}

MemoryEstimate estimate_cpu_memory(const Options& o, const ParamLayout& layout, const std::vector<Bucket>& buckets,
                                   int world_size) {
  const ViTConfig& c = layout.cfg;
  const size_t n = layout.total, f32 = sizeof(float);
  MemoryEstimate e;
  e.host = true;
  e.model = c.name;
  e.parameter_count = layout.parameter_count();
  e.batch = o.batch_size;
  e.precision = precision_name(o.precision);
  // The order of CpuEngine's constructor (src/engines/cpu_engine.cpp), then the trainer's BatchFeed.
  e.items.push_back({"parameters", "fp32, " + std::to_string(n) + " elements", n * f32});
  e.items.push_back({"gradients", "fp32, the DDP buckets", n * f32});
  e.items.push_back(optimizer_memory(o, layout, buckets, world_size));
  const BatchShape shape = batch_shape(c, o.batch_size);
  e.items.push_back({"inputs", "the staged batch: images and labels", shape.images_bytes() + shape.labels_bytes()});
  const CpuViTMemory m = cpu_vit_memory(layout, o.batch_size);
  e.items.push_back({"model weights", "the CPU model's double copy of the parameters and its transposed weights", m.weights});
  e.items.push_back({"activations", "double, saved by forward for backward, batch " + std::to_string(o.batch_size), m.activations});
  e.items.push_back({"activation grads", "double: the gradient accumulator and backward's activation gradients", m.backward});
  const auto [reducer, scratch] = cpu_reducer_memory(o, layout, buckets);
  e.items.push_back(reducer);
  const bool feed = o.data.kind != DataSpec::Kind::device;
  e.items.push_back({"data workers", std::to_string(kDefaultRingSlots) + " batch buffers of the data workers' ring",
                     feed ? kDefaultRingSlots * (shape.images_bytes() + shape.labels_bytes()) : 0});
  e.transient = {"PowerSGD scratch", "copy of a bucket and its uncompressed tensors, while the hook runs", scratch};
  return e;
}

MemoryEstimate estimate_cpu_memory(const Options& o, int world_size) {
  const ParamLayout layout = make_param_layout(vit_config(o.model, o.num_classes));
  const std::vector<Bucket> buckets = run_buckets(o, layout);
  return estimate_cpu_memory(o, layout, buckets, world_size);
}

size_t mem_available_bytes() {
  if (const char* fake = std::getenv("VITDDP_TEST_MEMAVAILABLE_KB")) return std::strtoull(fake, nullptr, 10) * 1024;
  std::ifstream f("/proc/meminfo");
  std::string key;
  size_t kb = 0;
  while (f >> key >> kb) {
    if (key == "MemAvailable:") return kb * 1024;
    f.ignore(256, '\n');
  }
  return 0;
}

std::string host_memory_refusal(const MemoryEstimate& e, int ranks_on_host, size_t available_bytes) {
  const size_t need = e.peak_bytes() * (size_t)ranks_on_host;
  if (available_bytes == 0 || need <= available_bytes) return "";
  return "--backend cpu: " + e.model + " at batch " + std::to_string(e.batch) + " needs " + gib(e.peak_bytes()) +
         " GiB of host memory per rank, " + std::to_string(ranks_on_host) + (ranks_on_host == 1 ? " rank" : " ranks") +
         " on this host need" + (ranks_on_host == 1 ? "s " : " ") + gib(need) + " GiB, but only " +
         gib(available_bytes) + " GiB is available (use a smaller --model or --batch-size)";
}

std::string memory_report(const MemoryEstimate& e) {
  std::string s = std::string("[vitddp] ") + (e.host ? "host memory per rank of the CPU backend: " : "device memory per rank of the GPU backend: ") + e.model + " (" +
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
  std::snprintf(line, sizeof(line), "  %-20s %15zu bytes %9s GiB  %s\n", "persistent", e.persistent_bytes(),
                gib(e.persistent_bytes()).c_str(),
                e.host ? "allocated while training" : "allocated while training (EngineInfo device_bytes)");
  s += line;
  std::snprintf(line, sizeof(line), "  %-20s %15zu bytes %9s GiB  the most at any time\n", "peak", e.peak_bytes(),
                gib(e.peak_bytes()).c_str());
  s += line;
  s += e.host ? "  not counted: a --data idx training split held in memory, MPI's buffers, the program and its libraries, "
                "malloc's overhead\n"
              : "  not counted: the CUDA context (about 0.5 GiB), NCCL's buffers, cudaMalloc's rounding to 2 MiB pages\n";
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
