// ZeRO-1's collectives over the copy engines (CopyEngineAllReduce::reduce_scatter, all_gather,
// max_over_ranks; mpi/transports/copy_engine_allreduce_gpu.h) under `mpirun -np N`, N >= 2, without
// any NCCL communicator, so two ranks may share one GPU (CUDA IPC between two processes on one
// device) as well as drive two. Against a host reference: the reduce-scatter's chunk (shard plan
// chunks, mpi/buckets/shard_plan.h) of buckets that divide by N, that do not, and that have fewer
// elements than ranks equals the host average bit for bit (values whose sums are exact in fp32,
// so the kernel's summation order cannot matter; the same multiplication by 1/N); the fp32 and bf16
// all-gathers restore every rank's chunk bit for bit into memory the peers have not mapped and
// write nothing outside the bucket (guard elements); the max exchange gives the maximum on every
// rank; all of it eagerly, then replayed twice from one CUDA graph with new data each time (every
// flag raised and cleared once per replay). The transport layer on top (plan, factory, overrides)
// the same way.
#include <cuda_runtime.h>
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cuda/check/check_cuda.h"
#include "cuda/model/device_buffer.h"
#include "cuda/model/step_graph.h"
#include "mpi/buckets/shard_plan.h"
#include "mpi/reducer/reducer_options.h"
#include "mpi/transports/copy_engine_allreduce_gpu.h"
#include "mpi/transports/gpu_transport_gpu.h"
#include "tests/catch.h"
#include "tests/gpu_mpi/gpu_mpi_test_util.h"

using namespace vitddp;
using vitddp_test::test_world;

namespace {

constexpr size_t kGuard = 3;  // guard elements before and after every bucket (so buckets start off 16-byte lines)
constexpr uint32_t kGuard32 = 0xA5A5A5A5u, kOther32 = 0xDEADBEEFu;
constexpr uint16_t kGuard16 = 0xA5A5u, kOther16 = 0xBEEFu;

/// Buckets laid out one after another, each between guard elements: bucket b at offset[b].
struct Layout {
  explicit Layout(std::vector<size_t> c) : count(std::move(c)) {
    for (size_t n : count) {
      offset.push_back(total + kGuard);
      total += n + 2 * kGuard;
      bytes.push_back(n * sizeof(float));
    }
  }
  std::vector<size_t> count, offset, bytes;  ///< per bucket: elements, first element, fp32 bytes
  size_t total = 0;                          ///< elements, guards included
};

/// The bucket sizes on n ranks: N-divisible ones, ones that are not (a large one: the sum
/// kernel's 16-byte body with an unaligned head), and one of fewer elements than ranks.
std::vector<size_t> bucket_counts(int n) {
  return {size_t(840) * n, size_t(70001), size_t(65536) * n + 1, n > 1 ? size_t(n - 1) : size_t(1), size_t(13)};
}

/// Rank q's gradient of element i of bucket b at step s: an integer times 2^-2..2^2, |x| < 2^14 N,
/// so any sum over the ranks is exact in fp32.
float gradient(int q, size_t b, size_t i, int s) {
  const int k = (q + 1 + s) * (int)((i * 7 + b * 13 + (size_t)s * 5) % 2048) - 1000;
  return std::ldexp((float)k, (int)(i % 5) - 2);
}

/// The host average of element i of bucket b at step s: the exact sum times 1/N, as the kernel
/// multiplies by the transport's scale (one fp32 rounding).
float average(int n, size_t b, size_t i, int s) {
  float sum = 0;
  for (int q = 0; q < n; ++q) sum += gradient(q, b, i, s);
  return sum * (1.0f / (float)n);
}

/// Rank q's fp32 parameter bits of element i of bucket b at step s (any 32 bits).
uint32_t param32(int q, size_t b, size_t i, int s) {
  uint32_t h = 2166136261u;
  for (uint32_t v : {(uint32_t)q, (uint32_t)b, (uint32_t)i, (uint32_t)s}) h = (h ^ v) * 16777619u;
  return h;
}
uint16_t param16(int q, size_t b, size_t i, int s) { return (uint16_t)(param32(q, b, i, s) >> 7); }

template <typename T>
std::vector<T> to_host(const DeviceBuffer<T>& d) {
  std::vector<T> h(d.size());
  CUDA_CHECK(cudaMemcpy(h.data(), d.get(), d.size() * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}
template <typename T>
void upload(DeviceBuffer<T>& d, const std::vector<T>& h) {
  CUDA_CHECK(cudaMemcpy(d.get(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
}

/// This rank's buffers for one step: gradients (registered with the copy engine), fp32 and bf16
/// parameters (not registered), the flag; filled for step s, checked after it.
struct Step {
  Step(const Layout& l, int n, int r)
      : L(l), n(n), r(r), grads(l.total, "gradients"), p32(l.total, "fp32 parameters"),
        p16(l.total, "bf16 parameters"), flag(1, "flag") {}

  /// Rank r's data of step s: its gradients everywhere, its own parameter chunks (the others and
  /// the guards hold markers), the flag 10 s + r (max: 10 s + n - 1) or, on odd steps, -r (max 0).
  void fill(int s) {
    float guard = 0;
    std::memcpy(&guard, &kGuard32, sizeof guard);
    std::vector<float> g(L.total, guard);
    std::vector<uint32_t> a(L.total, kGuard32);
    std::vector<uint16_t> h(L.total, kGuard16);
    for (size_t b = 0; b < L.count.size(); ++b) {
      const size_t c = shard_chunk(L.count[b], n), o = L.offset[b];
      for (size_t i = 0; i < L.count[b]; ++i) {
        g[o + i] = gradient(r, b, i, s);
        const bool own = i / c == (size_t)r;
        a[o + i] = own ? param32(r, b, i, s) : kOther32;
        h[o + i] = own ? param16(r, b, i, s) : kOther16;
      }
    }
    upload(grads, g);
    upload(p32, a);
    upload(p16, h);
    upload(flag, std::vector<int>{s % 2 ? -r : 10 * s + r});
  }

  /// Enqueues the step: the reduce-scatters in bucket order, the all-gathers (fp32, then bf16) in
  /// reverse bucket order as GpuReducer::all_gather runs them, the max exchange.
  void enqueue(CopyEngineAllReduce& ce, cudaStream_t st) {
    for (size_t b = 0; b < L.count.size(); ++b)
      ce.reduce_scatter(b, grads.get() + L.offset[b], L.count[b], DType::F32, 1.0f / (float)n, st);
    for (size_t b = L.count.size(); b-- > 0;) {
      ce.all_gather(b, p32.get() + L.offset[b], L.count[b], DType::F32, st);
      ce.all_gather(b, p16.get() + L.offset[b], L.count[b], DType::BF16, st);
    }
    ce.max_over_ranks(flag.get(), st);
  }

  /// Checks step s's results: this rank's gradient chunks are the host average bit for bit,
  /// every parameter chunk is its owner's, the guards are untouched, the flag is the maximum.
  void check(int s) {
    std::vector<float> g = to_host(grads);
    const std::vector<uint32_t> a = to_host(p32);
    const std::vector<uint16_t> h = to_host(p16);
    size_t wrong_avg = 0, wrong32 = 0, wrong16 = 0, guards = 0;
    std::vector<uint8_t> in_bucket(L.total, 0);
    for (size_t b = 0; b < L.count.size(); ++b) {
      const size_t c = shard_chunk(L.count[b], n), o = L.offset[b];
      for (size_t i = 0; i < L.count[b]; ++i) {
        in_bucket[o + i] = 1;
        const int q = (int)(i / c);
        if (q == r) {
          const float want = average(n, b, i, s);
          wrong_avg += std::memcmp(&g[o + i], &want, sizeof(float)) != 0;
        }
        wrong32 += a[o + i] != param32(q, b, i, s);
        wrong16 += h[o + i] != param16(q, b, i, s);
      }
    }
    for (size_t i = 0; i < L.total; ++i) {
      if (in_bucket[i]) continue;
      uint32_t gi = 0;
      std::memcpy(&gi, &g[i], sizeof gi);
      guards += (gi != kGuard32) + (a[i] != kGuard32) + (h[i] != kGuard16);
    }
    CHECK(wrong_avg == 0u);
    CHECK(wrong32 == 0u);
    CHECK(wrong16 == 0u);
    CHECK(guards == 0u);
    CHECK(to_host(flag)[0] == (s % 2 ? 0 : 10 * s + n - 1));
  }

  const Layout& L;
  int n, r;
  DeviceBuffer<float> grads;
  DeviceBuffer<uint32_t> p32;
  DeviceBuffer<uint16_t> p16;
  DeviceBuffer<int> flag;
};

}  // namespace

TEST_CASE("copy-engine ZeRO-1: reduce-scatter, fp32/bf16 all-gather and max exchange equal the host reference, "
          "eagerly and replayed from a CUDA graph",
          "[gpu][mpi][zero][copy-engine]") {
  const World w = test_world();  // with one visible GPU every rank uses device 0
  const int n = w.world_size, r = w.rank;
  REQUIRE(n >= 2);  // one rank has nothing to move (the transport uses NCCL there)
  const Layout L(bucket_counts(n));
  Step st(L, n, r);
  CopyEngineAllReduce ce(MPI_COMM_WORLD, {{st.grads.get(), L.total * sizeof(float)}}, L.bytes);
  CHECK(ce.world_size() == n);
  CHECK(ce.device_bytes() == CopyEngineAllReduce::planned_device_bytes(L.bytes, n));
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (int step = 0; step < 2; ++step) {  // eager, twice: the free flags raised by the first let the second go
    INFO("eager step " << step);
    st.fill(step);
    st.enqueue(ce, s);
    CUDA_CHECK(cudaStreamSynchronize(s));
    st.check(step);
  }
  StepGraph g;
  g.capture(s, [&] { st.enqueue(ce, s); });
  for (int step = 2; step < 4; ++step) {
    INFO("graph replay, step " << step);
    st.fill(step);
    g.launch(s);
    CUDA_CHECK(cudaStreamSynchronize(s));
    st.check(step);
  }
  // Refused before anything is enqueued (so no flag is raised): a 16-bit reduce-scatter, a bucket
  // past the last, a payload larger than its bucket.
  CHECK_THROWS_AS(ce.reduce_scatter(0, st.grads.get() + L.offset[0], L.count[0], DType::BF16, 1.0f, s),
                  std::invalid_argument);
  CHECK_THROWS_AS(ce.all_gather(L.count.size(), st.p32.get(), 1, DType::F32, s), std::invalid_argument);
  CHECK_THROWS_AS(ce.all_gather(4, st.p32.get() + L.offset[4], L.count[4] + 1, DType::F32, s), std::invalid_argument);
  CUDA_CHECK(cudaStreamDestroy(s));
}

TEST_CASE("copy-engine transport shards: plan, factory and ZeRO-1 overrides average and gather as the NCCL one",
          "[gpu][mpi][zero][copy-engine]") {
  const World w = test_world();
  const int n = w.world_size, r = w.rank;
  ReducerOptions ro;
  ro.allreduce = "copy-engine";
  ro.shard_optimizer = true;
  const Layout L(bucket_counts(n));
  const GpuTransportEntry& entry = gpu_transport("copy-engine");
  const GpuTransportPlan plan = entry.plan(ro, n, L.bytes);
  CHECK(plan.shards);
  CHECK(plan.device_bytes == (n == 1 ? 0 : CopyEngineAllReduce::planned_device_bytes(L.bytes, n)));
  if (n == 1) return;  // one rank: the NCCL transport (tests/gpu_mpi/test_zero_nccl.cpp), which needs a communicator
  Step st(L, n, r);
  // No communicator: the copy-engine transport reaches its peers through MPI_COMM_WORLD and CUDA IPC.
  const std::unique_ptr<GpuTransport> t =
      entry.make(GpuTransportArgs{nullptr, n, ro, {{st.grads.get(), L.total * sizeof(float)}}, L.bytes});
  CHECK(std::string(t->name()) == "copy-engine");
  CHECK(t->shards());
  CHECK(t->uses_copy_engines());
  CHECK_FALSE(t->checks_nonfinite());  // ZeRO-1: the engine flags its own chunks
  CHECK_THROWS_AS(t->flag_nonfinite(st.flag.get(), nullptr), std::logic_error);
  CHECK(t->device_bytes() == plan.device_bytes);
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (int step = 0; step < 2; ++step) {
    INFO("step " << step);
    st.fill(step);
    t->begin_step(s);  // nothing to clear with ZeRO-1, as end_step has nothing to exchange
    for (size_t b = 0; b < L.count.size(); ++b)
      t->reduce_scatter(b, st.grads.get() + L.offset[b], L.count[b], DType::F32, ReduceOp::Avg, s);
    t->end_step(s);
    for (size_t b = L.count.size(); b-- > 0;) {
      t->all_gather(b, st.p32.get() + L.offset[b], L.count[b], DType::F32, s);
      t->all_gather(b, st.p16.get() + L.offset[b], L.count[b], DType::BF16, s);
    }
    t->max_over_ranks(st.flag.get(), s);
    CUDA_CHECK(cudaStreamSynchronize(s));
    st.check(step);
  }
  CUDA_CHECK(cudaStreamDestroy(s));
}
