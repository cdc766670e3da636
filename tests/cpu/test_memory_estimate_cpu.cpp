// The host-memory estimate of the CPU backend (src/engines/memory_estimate.h: --dry-run --backend cpu and
// the host-memory check before the CPU backend allocates): the CPU model's own count of its
// buffers, the engine's, hand-computed sizes of the rest, and the refusal line.
#include <malloc.h>

#include <string>

#include "model/cpu_vit.h"
#include "model/vit_config.h"
#include "src/engines/engine.h"
#include "src/engines/memory_estimate.h"
#include "tests/test_util.h"

using namespace vitddp;
using vitddp_test::parse_args;

namespace {

ParamLayout layout_of(const std::string& model) { return make_param_layout(vit_config(model, 10)); }

}  // namespace

TEST_CASE("cpu memory estimate: the CPU model's buffers equal what CpuViT allocates", "[memory][cpu]") {
  for (const std::string model : {"vit_micro", "vit_tiny"}) {
    const ParamLayout L = layout_of(model);
    for (int batch : {1, 3, 32}) {
      INFO(model << " batch " << batch);
      const CpuViT<float> m(L, batch);
      CHECK(cpu_vit_memory(L, batch).total() == m.allocated_bytes());
      const CpuViT<double> md(L, batch);  // the buffers are double whatever the storage type
      CHECK(cpu_vit_memory(L, batch).total() == md.allocated_bytes());
    }
  }
}

TEST_CASE("cpu memory estimate: parameters, gradients and optimizer state equal the engine's", "[memory][cpu]") {
  for (const char* opt : {"sgd", "adamw"}) {
    const bool adamw = std::string(opt) == "adamw";
    Options o = parse_args({"--backend", "cpu", "--model", "vit_tiny", "--num-classes", "10", "--batch-size", "4",
                            adamw ? "--optimizer" : "--momentum", adamw ? "adamw" : "0.9", "--no-ddp"});
    const ParamLayout L = layout_of("vit_tiny");
    const World w;
    const auto engine = make_cpu_engine(o, w, L, {}, nullptr);
    const MemoryEstimate e = estimate_cpu_memory(o);
    INFO(opt);
    CHECK(e.host);
    CHECK(e.bytes_of("parameters") + e.bytes_of("gradients") + e.bytes_of("optimizer state") ==
          engine->info().device_bytes);
    CHECK(e.bytes_of("optimizer state") == (adamw ? 2 : 1) * L.total * sizeof(float));
    CHECK(e.bytes_of("reducer") == 0);  // --no-ddp: no reducer
  }
}

TEST_CASE("cpu memory estimate: inputs, data workers, reducer by hand", "[memory][cpu]") {
  const ParamLayout L = layout_of("vit_micro");
  const ViTConfig& c = L.cfg;
  const size_t B = 5, batch_bytes = B * c.channels * c.image_size * c.image_size * 4 + B * 4;
  Options o = parse_args({"--backend", "cpu", "--model", "vit_micro", "--num-classes", "10", "--batch-size", "5"});
  MemoryEstimate e = estimate_cpu_memory(o);
  CHECK(e.bytes_of("inputs") == batch_bytes);
  CHECK(e.bytes_of("data workers") == 3 * batch_bytes);
  CHECK(e.bytes_of("reducer") == 0);  // gradient_as_bucket_view, no compression: in place
  CHECK(e.transient.bytes == 0);
  size_t padded = 0;  // the buckets' elements, padding included
  for (const auto& b : run_buckets(o, L))
    padded += b.numel;
  o = parse_args({"--backend", "cpu", "--model", "vit_micro", "--num-classes", "10", "--compression", "bf16"});
  CHECK(estimate_cpu_memory(o).bytes_of("reducer") == padded * 2);
  o = parse_args({"--backend", "cpu", "--model", "vit_micro", "--num-classes", "10", "--compression", "fp16",
                  "--grad-as-bucket-view", "off"});
  CHECK(estimate_cpu_memory(o).bytes_of("reducer") == padded * 2 + L.total * 4);
  e = estimate_cpu_memory(o);
  size_t sum = 0;
  for (const auto& i : e.items) sum += i.bytes;
  CHECK(e.peak_bytes() == sum);
}

TEST_CASE("cpu memory estimate: the refusal when the ranks of a host do not fit", "[memory][cpu]") {
  MemoryEstimate e;
  e.host = true;
  e.model = "vit_l_32";
  e.batch = 32;
  e.items.push_back({"parameters", "", size_t(11.9 * 1073741824.0)});
  const size_t available = size_t(20.1 * 1073741824.0);
  CHECK(host_memory_refusal(e, 2, available) ==
        "--backend cpu: vit_l_32 at batch 32 needs 11.9 GiB of host memory per rank, 2 ranks on this host need "
        "23.8 GiB, but only 20.1 GiB is available (use a smaller --model or --batch-size)");
  CHECK(host_memory_refusal(e, 1, available).empty());
  CHECK(host_memory_refusal(e, 2, 0).empty());  // unknown budget: no check
  CHECK(host_memory_refusal(e, 1, available / 2).find("1 rank on this host needs 11.9 GiB") != std::string::npos);
}

TEST_CASE("cpu memory estimate: the engine's heap growth (mallinfo2) matches the estimate", "[memory][cpu]") {
  // Everything CpuEngine keeps (without a reducer: --no-ddp), measured as the heap in use
  // (glibc's mallinfo2: arena bytes in use + mmapped bytes) after minus before construction. The
  // difference is malloc's chunk headers and the engine's small bookkeeping: under 1 %.
  const Options o = parse_args({"--backend", "cpu", "--model", "vit_tiny", "--num-classes", "10", "--batch-size", "16",
                                "--momentum", "0.9", "--no-ddp"});
  const ParamLayout L = layout_of("vit_tiny");
  const MemoryEstimate e = estimate_cpu_memory(o);
  const size_t engine_bytes = e.persistent_bytes() - e.bytes_of("data workers") - e.bytes_of("reducer");
  const World w;
  auto in_use = [] {
    const struct mallinfo2 m = mallinfo2();
    return m.uordblks + m.hblkhd;
  };
  const size_t before = in_use();
  const auto engine = make_cpu_engine(o, w, L, {}, nullptr);
  const size_t grown = in_use() - before;
  INFO("estimate " << engine_bytes << " bytes, heap grew by " << grown);
  CHECK(grown >= engine_bytes);
  CHECK(grown <= engine_bytes + engine_bytes / 100);
}
