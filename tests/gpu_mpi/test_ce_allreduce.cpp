// The copy-engine all-reduce (--allreduce copy-engine, mpi/transports/copy_engine_allreduce_gpu.h) on 2 GPUs
// (`mpirun -np 2`): against a double-precision host reference of the average, bit-identical on
// both ranks, for every compression it supports and both bucket modes, eagerly and replayed from
// a CUDA graph with new gradients each replay (the flags must be cleared between steps).
#include <cuda_runtime.h>
#include <mpi.h>

#include <cmath>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "cuda/check/check_cuda.h"
#include "cuda/model/device_buffer.h"
#include "cuda/model/step_graph.h"
#include "model/fnv1a.h"
#include "model/param_layout.h"
#include "mpi/hooks/half_host.h"
#include "mpi/world/nccl_comm_gpu.h"
#include "mpi/reducer/gpu_reducer_gpu.h"
#include "mpi/world/world.h"
#include "tests/catch.h"
#include "tests/gpu_mpi/gpu_mpi_test_util.h"

using namespace vitddp;
using vitddp_test::test_world;
using vitddp_test::two_rank_16bit_average;

namespace {

/// Rank r's gradients of step s: normal numbers of varied magnitude (no denormals, no zeros).
std::vector<float> gradients_of(int rank, int step, size_t n) {
  std::mt19937 gen(1000u * (unsigned)step + (unsigned)rank);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::uniform_int_distribution<int> e(-8, 8);
  std::vector<float> v(n);
  for (auto& x : v) x = std::ldexp(d(gen) + (d(gen) > 0 ? 0.25f : -0.25f), e(gen));
  return v;
}

/// Elements where `out` is farther from the exact average of ranks 0 and 1 than `rel` times the
/// mean magnitude of the two addends (parameter elements only; padding is not a gradient).
size_t wrong_elements(const ParamLayout& L, const std::vector<float>& out, int step, double rel) {
  const auto a = gradients_of(0, step, L.total), b = gradients_of(1, step, L.total);
  size_t wrong = 0;
  for (const auto& p : L.params)
    for (size_t i = p.offset; i < p.offset + p.numel; ++i) {
      const double exact = 0.5 * ((double)a[i] + (double)b[i]);
      const double scale = 0.5 * (std::fabs((double)a[i]) + std::fabs((double)b[i]));
      wrong += std::fabs((double)out[i] - exact) > rel * scale;
    }
  return wrong;
}

/// True iff `h` is the same on every rank.
bool same_on_all_ranks(uint64_t h) { return all_ranks_equal(h); }

uint64_t hash_of(const std::vector<float>& v) {
  Fnv1a h;
  h.add_bytes(v.data(), v.size() * sizeof(float));
  return h.value();
}

/// Relative tolerance of the averaged result for a compression: fp32 rounds once (the sum);
/// fp16/bf16 round the halves and then the sum (a few units in the last place).
double tolerance(const std::string& c) {
  return c == "none" ? 1.2e-7 : c == "bf16" ? 3.0 * std::ldexp(1.0, -8) : 3.0 * std::ldexp(1.0, -11);
}

/// The 16-bit hooks' average of step `step`'s gradients of ranks 0 and 1 (two_rank_16bit_average).
std::vector<float> hook_emulation(const std::string& c, int step, size_t n) {
  const auto a = gradients_of(0, step, n), b = gradients_of(1, step, n);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = two_rank_16bit_average(c, a[i], b[i]);
  return out;
}

/// Reducer options with the copy-engine all-reduce.
ReducerOptions ce_options(const std::string& c, bool view = true, bool overlap = true) {
  ReducerOptions ro;
  ro.compression = c;
  ro.grad_as_bucket_view = view;
  ro.overlap = overlap;
  ro.allreduce = std::string("copy-engine");
  return ro;
}

/// What both tests share: 2 ranks, vit_tiny's layout in buckets of at most `cap` bytes (the
/// first one `first` bytes), an NCCL communicator, device gradients and a stream.
struct TwoRanks {
  explicit TwoRanks(size_t first = 4096, size_t cap = 65536)
      : w(test_world()), L(make_param_layout(vit_config("vit_tiny"))), B(assign_buckets(L, first, cap)), comm(w),
        grads(L.total, "gradients") {
    REQUIRE(w.world_size == 2);
    REQUIRE(B.size() > 3);
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  }
  ~TwoRanks() { cudaStreamDestroy(stream); }
  void set(int step) {
    const auto mine = gradients_of(w.rank, step, L.total);
    CUDA_CHECK(cudaMemcpy(grads.get(), mine.data(), L.total * sizeof(float), cudaMemcpyHostToDevice));
  }
  /// Enqueues one step of `r` on the stream: every parameter ready in backward's order, then finalize().
  void reduce_step(GpuReducer& r) {
    r.prepare_for_backward();
    for (size_t p : L.ready_order()) r.mark_ready({p});
    r.finalize();
  }
  /// reduce_step() captured as a CUDA graph, as the engine captures the training step.
  void capture_step(GpuReducer& r, StepGraph& g) {
    g.capture(stream, [&] { reduce_step(r); });
  }
  /// The reducer's non-finite verdict on the finished step (0 or 1), read on the host.
  int nonfinite(const GpuReducer& r) {
    REQUIRE(r.checks_nonfinite());
    CUDA_CHECK(cudaMemsetAsync(flag.get(), 0, sizeof(int), stream));
    r.flag_nonfinite(flag.get(), stream);
    int h = -1;
    CUDA_CHECK(cudaMemcpyAsync(&h, flag.get(), sizeof(int), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    return h;
  }
  /// Checks the averaged gradients of `step` (after the stream's work) and their identity on both ranks.
  void check(int step, const std::string& c) {
    CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<float> out(L.total);
    CUDA_CHECK(cudaMemcpy(out.data(), grads.get(), L.total * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK(wrong_elements(L, out, step, tolerance(c)) == 0u);
    CHECK(same_on_all_ranks(hash_of(out)));
  }
  World w;
  ParamLayout L;
  std::vector<Bucket> B;
  NcclComm comm;
  DeviceBuffer<float> grads;
  DeviceBuffer<int> flag{1, "non-finite flag"};
  cudaStream_t stream = nullptr;
};

}  // namespace

TEST_CASE("copy-engine all-reduce averages like the host reference, bit-identical on both ranks",
          "[gpu][mpi][ce_allreduce]") {
  // Small buckets (odd sizes), and tiny ones: one tensor each, many of at most 64 elements, so
  // rank 1's chunk is empty.
  const size_t cap = GENERATE(size_t{65536}, size_t{256});
  INFO("bucket cap " << cap << " bytes");
  TwoRanks t(cap == 256 ? 256 : 4096, cap);
  for (const std::string c : {"none", "fp16", "bf16"})
    for (bool view : {true, false})
      for (bool overlap : {true, false}) {
        INFO(c << (view ? ", bucket view" : ", bucket copy") << (overlap ? "" : ", no overlap"));
        const ReducerOptions ro = ce_options(c, view, overlap);
        GpuReducer reducer(t.L, t.B, t.grads.get(), t.comm.get(), t.stream, ro);
        CHECK(reducer.device_bytes() == GpuReducer::planned_device_bytes(t.L, t.B, ro, t.w.world_size));
        t.set(0);
        t.reduce_step(reducer);
        t.check(0, c);
        CHECK(t.nonfinite(reducer) == 0);
      }
}

TEST_CASE("copy-engine fp16/bf16 hooks (casts fused into the sum) equal the host emulation bit for bit",
          "[gpu][mpi][ce_allreduce]") {
  const size_t cap = GENERATE(size_t{65536}, size_t{256});
  INFO("bucket cap " << cap << " bytes");
  TwoRanks t(cap == 256 ? 256 : 4096, cap);
  for (const std::string c : {"fp16", "bf16"})
    for (bool view : {true, false})
      for (int streams : {1, 3}) {  // several comm streams: a staging buffer each
      INFO(c << (view ? ", bucket view" : ", bucket copy") << ", comm streams " << streams);
      ReducerOptions ro = ce_options(c, view);
      ro.comm_streams = streams;
      GpuReducer reducer(t.L, t.B, t.grads.get(), t.comm.get(), t.stream, ro);
      t.set(3);
      cudaEvent_t start;
      CUDA_CHECK(cudaEventCreate(&start));
      CUDA_CHECK(cudaEventRecord(start, t.stream));
      t.reduce_step(reducer);
      CUDA_CHECK(cudaStreamSynchronize(t.stream));
      std::vector<float> out(t.L.total);
      CUDA_CHECK(cudaMemcpy(out.data(), t.grads.get(), t.L.total * sizeof(float), cudaMemcpyDeviceToHost));
      const auto want = hook_emulation(c, 3, t.L.total);
      size_t wrong = 0;  // compared as bits (a -0 for a +0 would count)
      for (const auto& p : t.L.params)
        for (size_t i = p.offset; i < p.offset + p.numel; ++i) wrong += std::memcmp(&out[i], &want[i], sizeof(float)) != 0;
      CHECK(wrong == 0u);
      // Every bucket is reported compressed, 16 bits per element, with its timed phases: casts
      // of the peer's chunk (when it has one: chunks are cut at multiples of 64 elements), the
      // all-reduce, casts back.
      const BucketTimes bt = reducer.times(start);
      for (size_t b = 0; b < t.B.size(); ++b) {
        INFO("bucket " << b);
        const size_t n = t.B[b].numel, cs = ((n + 1) / 2 + 63) / 64 * 64;
        const size_t peer_chunk = t.w.rank == 0 ? n - std::min(n, cs) : std::min(n, cs);
        CHECK(bt.compressed[b] == 1);
        CHECK(bt.bytes_sent[b] == 2ull * n);
        CHECK(bt.allreduce_ms[b] > 0.0);
        if (peer_chunk > 0) CHECK(bt.compress_ms[b] > 0.0);
        CHECK(bt.end_ms[b] - bt.start_ms[b] >= bt.allreduce_ms[b] + bt.compress_ms[b] - 1e-3);
      }
      CUDA_CHECK(cudaEventDestroy(start));
    }
}

TEST_CASE("copy-engine all-reduce: a NaN or Inf on one rank, in either rank's chunk, flags the step on both",
          "[gpu][mpi][ce_allreduce]") {
  TwoRanks t;
  for (const std::string c : {"none", "bf16"})
  for (int streams : {1, 2}) {
    INFO(c << ", comm streams " << streams);
    ReducerOptions ro = ce_options(c);
    ro.comm_streams = streams;
    GpuReducer reducer(t.L, t.B, t.grads.get(), t.comm.get(), t.stream, ro);
    StepGraph graph;
    t.capture_step(reducer, graph);
    // Rank 0 poisons one element: first of the largest bucket (rank 0's chunk), then its last
    // element (rank 1's chunk); the replay after each is clean again (the flags are cleared).
    const Bucket& big = *std::max_element(t.B.begin(), t.B.end(),
                                          [](const Bucket& a, const Bucket& b) { return a.numel < b.numel; });
    for (size_t at : {big.offset, big.offset + big.numel - 1}) {
      INFO("element " << at);
      for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
        t.set(1);
        if (t.w.rank == 0) CUDA_CHECK(cudaMemcpy(t.grads.get() + at, &bad, sizeof bad, cudaMemcpyHostToDevice));
        graph.launch(t.stream);
        CHECK(t.nonfinite(reducer) == 1);
        t.set(2);
        graph.launch(t.stream);
        CHECK(t.nonfinite(reducer) == 0);
        t.check(2, c);
      }
    }
  }
}

TEST_CASE("copy-engine all-reduce replayed from a CUDA graph: every replay averages that step's gradients",
          "[gpu][mpi][ce_allreduce]") {
  TwoRanks t;
  for (const std::string c : {"none", "bf16"})
  for (int streams : {1, 2, 3}) {
    INFO(c << ", comm streams " << streams);
    ReducerOptions ro = ce_options(c);
    ro.comm_streams = streams;
    GpuReducer reducer(t.L, t.B, t.grads.get(), t.comm.get(), t.stream, ro);
    t.set(0);  // an eager step first, as the engine's first step, then the captured ones
    t.reduce_step(reducer);
    t.check(0, c);
    StepGraph graph;
    t.capture_step(reducer, graph);
    for (int step = 1; step <= 6; ++step) {
      INFO("replay " << step);
      t.set(step);
      graph.launch(t.stream);
      t.check(step, c);
    }
  }
}
