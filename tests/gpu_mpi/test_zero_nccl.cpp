// ZeRO stage 1 (--shard-optimizer) on the GPU backend, 2 GPUs (`mpirun -np 2`; the transport case
// takes any rank count): the NCCL transport's in-place reduce-scatter and all-gather, padded and
// not, against hand-computed values; the GPU reducer's in-place shard, per-bucket all-gather events
// and flag exchange; the sharded GPU engine against the DDP GPU engine (fp32 and bf16, SGD with
// momentum and AdamW, CUDA graph on and off, accumulation, a non-finite step, the gathered state),
// bit for bit where the next forward overlaps the all-gathers (every block waiting only for its
// buckets: a block that read a stale bucket would change that step's loss). The reducer and the
// engine cases run over both transports, --allreduce nccl and copy-engine (the copy engine's own
// collectives: tests/gpu_mpi/test_ce_zero.cpp).
#include <cuda_runtime.h>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cuda/check/check_cuda.h"
#include "cuda/model/device_buffer.h"
#include "mpi/buckets/shard_plan.h"
#include "mpi/reducer/gpu_reducer_gpu.h"
#include "mpi/transports/gpu_transport_gpu.h"
#include "mpi/world/nccl_comm_gpu.h"
#include "src/engines/engine.h"
#include "src/engines/memory_estimate.h"
#include "tests/catch.h"
#include "tests/gpu_mpi/gpu_mpi_test_util.h"
#include "tests/test_util.h"
#include "tests/zero_check.h"

using namespace vitddp;
using vitddp_test::max_abs_diff;
using vitddp_test::run_zero_steps;
using vitddp_test::test_world;

using vitddp_test::zero_options;

namespace {

template <typename T>
std::vector<T> to_host(const T* d, size_t n) {
  std::vector<T> h(n);
  CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

template <typename T>
DeviceBuffer<T> to_device(const std::vector<T>& h, const char* what) {
  DeviceBuffer<T> d(h.size(), what);
  CUDA_CHECK(cudaMemcpy(d.get(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

/// The options of DDP and of ZeRO-1 for `args` over `transport` (--allreduce), the ZeRO-1 run
/// with the fp32 all-gather: DDP's arithmetic (auto would gather bf16 under --precision bf16 on
/// 2 ranks).
std::pair<Options, Options> ddp_and_zero(std::vector<std::string> args, const char* transport) {
  args.insert(args.end(), {"--allreduce", transport});
  std::vector<std::string> za = args;
  for (const char* a : {"--shard-optimizer", "--allgather-dtype", "fp32"}) za.push_back(a);
  return {zero_options("gpu", args), zero_options("gpu", za)};
}

}  // namespace

TEST_CASE("NCCL transport: ZeRO-1 reduce-scatter and all-gather of divisible and padded buckets",
          "[gpu][mpi][zero]") {
  const World w = test_world();
  const int n = w.world_size, r = w.rank;
  NcclComm comm(w);
  ReducerOptions ro;
  ro.shard_optimizer = true;
  // Bucket 0 divides by any rank count up to 4 (12 elements), bucket 1 by none above 1 (7 elements).
  const std::vector<size_t> counts = {12, 7};
  std::vector<size_t> bytes;
  for (size_t c : counts) bytes.push_back(c * sizeof(float));
  const GpuTransportEntry& entry = gpu_transport("nccl");
  const GpuTransportPlan plan = entry.plan(ro, n, bytes);
  CHECK(plan.shards);
  CHECK(plan.device_bytes == (n == 1 ? 0 : n * shard_chunk(7, n) * sizeof(float)));  // the 7-element bucket, padded
  DeviceBuffer<float> region(1, "unused");
  const std::unique_ptr<GpuTransport> t =
      entry.make(GpuTransportArgs{comm.get(), n, ro, {{region.get(), sizeof(float)}}, bytes});
  CHECK(t->device_bytes() == plan.device_bytes);
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (size_t count : counts) {
    INFO(count << " elements on " << n << " ranks");
    const size_t c = shard_chunk(count, n), mine = shard_count(count, n, r);
    std::vector<float> x(count);
    for (size_t i = 0; i < count; ++i) x[i] = (float)((r + 1) * (int)(i + 1));  // rank q: (q + 1)(i + 1)
    DeviceBuffer<float> dx = to_device(x, "bucket");
    t->reduce_scatter(0, dx.get(), count, DType::F32, ReduceOp::Sum, s);
    CUDA_CHECK(cudaStreamSynchronize(s));
    const std::vector<float> got = to_host(dx.get(), count);
    for (size_t j = 0; j < mine; ++j)  // in place: this rank's chunk holds its sum
      CHECK(got[r * c + j] == (float)(n * (n + 1) / 2 * (int)(r * c + j + 1)));
    // All-gather in place: rank q's chunk holds 100 q + j, the rest -5; nothing is written past `count`.
    std::vector<float> y(count + 3, -5.0f);
    for (size_t j = 0; j < mine; ++j) y[r * c + j] = (float)(100 * r + j);
    DeviceBuffer<float> dy = to_device(y, "bucket and guard");
    t->all_gather(0, dy.get(), count, DType::F32, s);
    CUDA_CHECK(cudaStreamSynchronize(s));
    const std::vector<float> all = to_host(dy.get(), count + 3);
    for (size_t i = 0; i < count; ++i) CHECK(all[i] == (float)(100 * (i / c) + i % c));
    for (size_t i = count; i < count + 3; ++i) CHECK(all[i] == -5.0f);
  }
  // The flag exchange: the maximum over the ranks.
  DeviceBuffer<int> flag = to_device(std::vector<int>{r == n - 1 ? 1 : 0}, "flag");
  t->max_over_ranks(flag.get(), s);
  CUDA_CHECK(cudaStreamSynchronize(s));
  CHECK(to_host(flag.get(), 1)[0] == 1);
  CUDA_CHECK(cudaStreamDestroy(s));
}

TEST_CASE("GPU reducer, ZeRO-1: each rank's chunks hold the average in place, the all-gather restores the parameters",
          "[gpu][mpi][zero]") {
  const World w = test_world();
  REQUIRE(w.world_size == 2);
  const ParamLayout L = make_param_layout(vit_config("vit_b_32"));
  const auto buckets = assign_buckets(L, 1 << 20, 25 << 20);
  DeviceBuffer<float> grads = to_device(std::vector<float>(L.total, (float)(w.rank + 1)), "gradients");
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  NcclComm comm(w);
  for (const char* transport : {"nccl", "copy-engine"}) {
    INFO("--allreduce " << transport);
    const bool nccl = std::string(transport) == "nccl";
    CUDA_CHECK(cudaMemcpy(grads.get(), std::vector<float>(L.total, (float)(w.rank + 1)).data(), L.total * sizeof(float),
                          cudaMemcpyHostToDevice));
    ReducerOptions ro;
    ro.shard_optimizer = true;
    ro.allreduce = transport;
    GpuReducer reducer(L, buckets, grads.get(), comm.get(), stream, ro);
    const ShardPlan& plan = *reducer.shard_plan();
    CHECK(reducer.device_bytes() == GpuReducer::planned_device_bytes(L, buckets, ro, 2));
    // vit_b_32's buckets divide by 2: no padded scratch over NCCL; the copy engines' scratch and flags.
    if (nccl) CHECK(reducer.device_bytes() == 0);
    if (!nccl) CHECK(reducer.device_bytes() > 0);
    cudaEvent_t start;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventRecord(start, stream));
    reducer.prepare_for_backward();
    for (size_t p : L.ready_order()) reducer.mark_ready({p});
    reducer.finalize();
    CUDA_CHECK(cudaStreamSynchronize(stream));
    const std::vector<float> g = to_host(grads.get(), L.total);
    size_t wrong = 0;
    for (const ShardSlice& s : plan.slices())
      for (size_t j = 0; j < s.count; ++j) wrong += g[s.flat_offset + j] != 1.5f;
    CHECK(wrong == 0u);
    // All-gather in place: each rank's chunks of the parameters hold 1000 rank + element index, the rest -1.
    std::vector<float> mine(L.total, -1.0f);
    for (const ShardSlice& s : plan.slices())
      for (size_t j = 0; j < s.count; ++j) mine[s.flat_offset + j] = (float)(1000 * w.rank + (s.flat_offset + j) % 997);
    DeviceBuffer<float> params = to_device(mine, "params");
    DeviceBuffer<__nv_bfloat16> bf16(L.total, "bf16 copy");
    const int set = reducer.all_gather(params.get(), bf16.get(), stream);
    CHECK(set == 0);
    // Nothing waits by itself: the stream waits for one bucket's event, then for all of them.
    CUDA_CHECK(cudaStreamWaitEvent(stream, reducer.gathered(set, buckets.size() - 1), 0));
    CUDA_CHECK(cudaStreamWaitEvent(stream, reducer.params_ready(set), 0));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    for (size_t b = 0; b < buckets.size(); ++b) CHECK(cudaEventQuery(reducer.gathered(set, b)) == cudaSuccess);
    const std::vector<float> p = to_host(params.get(), L.total);
    const std::vector<__nv_bfloat16> pb = to_host(bf16.get(), L.total);
    wrong = 0;
    size_t wrong16 = 0;
    for (int q = 0; q < 2; ++q)
      for (size_t b = 0; b < buckets.size(); ++b) {
        const ShardSlice s = plan.slice_of(b, q);
        for (size_t j = 0; j < s.count; ++j) {
          const float want = (float)(1000 * q + (s.flat_offset + j) % 997);
          wrong += p[s.flat_offset + j] != want;
          wrong16 += __bfloat162float(pb[s.flat_offset + j]) != __bfloat162float(__float2bfloat16(want));
        }
      }
    CHECK(wrong == 0u);
    CHECK(wrong16 == 0u);  // the bf16 working copy follows the gathered parameters
    BucketTimes t = reducer.times(start);
    for (size_t b = 0; b < buckets.size(); ++b) CHECK(t.allgather_bytes[b] == 0);  // times() holds the reduce-scatters
    reducer.gather_times(set, start, &t);
    for (size_t b = 0; b < buckets.size(); ++b) {
      CHECK(t.reduce_scattered[b] == 1);
      CHECK(t.allgather_bytes[b] == buckets[b].bytes());
      CHECK(t.allgather_end_ms[b] >= t.allgather_start_ms[b]);
      CHECK(t.allgather_start_ms[b] >= t.end_ms[b]);  // after the reduce-scatter, on the same stream
    }
    // The next call records the other event set (a graph waiting on set 0 stays valid meanwhile).
    CHECK(reducer.all_gather(params.get(), nullptr, stream) == 1);
    CHECK(reducer.gathered(1, 0) != reducer.gathered(0, 0));
    CUDA_CHECK(cudaStreamWaitEvent(stream, reducer.params_ready(1), 0));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    CHECK(to_host(params.get(), L.total) == p);  // gathering again changes nothing
    // A flag raised on rank 1 only is raised on both.
    DeviceBuffer<int> flag = to_device(std::vector<int>{w.rank}, "flag");
    reducer.agree_nonfinite(flag.get(), stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    CHECK(to_host(flag.get(), 1)[0] == 1);
    cudaEventDestroy(start);
  }
  CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST_CASE("GPU engine, ZeRO-1 on 2 GPUs equals DDP: fp32 and bf16, SGD and AdamW, graph on and off, accumulation",
          "[gpu][mpi][zero]") {
  const World w = test_world();
  REQUIRE(w.world_size == 2);
  const ParamLayout L = make_param_layout(vit_config("vit_micro"));
  struct Case {
    std::vector<std::string> args;
    int micro;
  };
  const std::vector<Case> cases = {
      {{"--momentum", "0.9", "--weight-decay", "0.01"}, 1},
      {{"--optimizer", "adamw", "--weight-decay", "0.05", "--lr", "0.01", "--cuda-graph", "off"}, 1},
      {{"--momentum", "0.9", "--precision", "bf16"}, 1},
      {{"--optimizer", "adamw", "--precision", "bf16", "--grad-accum-steps", "2"}, 2},
  };
  for (const char* transport : {"nccl", "copy-engine"})
  for (const Case& c : cases) {
    const auto [od, oz] = ddp_and_zero(c.args, transport);
    const auto buckets = run_buckets(od, L);
    auto ddp = make_gpu_engine(od, w, L, buckets, nullptr);
    auto zero = make_gpu_engine(oz, w, L, buckets, nullptr);
    const std::vector<float> p0 = ddp->parameters();
    REQUIRE(zero->parameters() == p0);
    const auto recs = run_zero_steps({ddp.get(), zero.get()}, L, 5, c.micro);  // steps 2.. replay CUDA graphs
    INFO("--allreduce " << transport << ", " << to_string(oz.optimizer) << ", " << to_string(oz.precision)
                        << ", cuda graph " << oz.cuda_graph << ", " << c.micro << " micro-step(s)");
    CHECK(max_abs_diff(zero->parameters(), ddp->parameters()) <= 1e-6);
    CHECK(max_abs_diff(ddp->parameters(), p0) > 1e-3);  // not vacuous
    CHECK(recs[1].loss == Approx(recs[0].loss).epsilon(1e-6));
    for (size_t b = 0; b < buckets.size(); ++b) {
      CHECK(recs[1].buckets.reduce_scattered[b] == 1);
      CHECK(recs[1].buckets.allgather_bytes[b] == buckets[b].bytes());
    }
    const TrainState sd = ddp->train_state(), sz = zero->train_state();  // collective for the sharded engine
    CHECK(sz.optimizer_steps == sd.optimizer_steps);
    if (w.rank == 0) {
      CHECK(max_abs_diff(sz.params, sd.params) <= 1e-6);
      for (size_t k = 0; k < sd.optimizer.size(); ++k) CHECK(max_abs_diff(sz.optimizer[k].second, sd.optimizer[k].second) <= 1e-5);
    }
  }
}

TEST_CASE("GPU engine, ZeRO-1 on 2 GPUs equals DDP bit for bit while the next forward overlaps the all-gathers",
          "[gpu][mpi][zero]") {
  // Two ranks: every averaged element is the same sum of two values in the all-reduce and the
  // reduce-scatter, and the update is the same element-wise kernel, so the results agree bit for
  // bit, step by step, unless a forward reads a bucket before its all-gather is done (its loss and
  // everything after would differ). CUDA graph on: the waits are event-wait nodes inside the
  // replayed graph, on the two alternating event sets; off: eager waits.
  const World w = test_world();
  REQUIRE(w.world_size == 2);
  const ParamLayout L = make_param_layout(vit_config("vit_micro"));
  struct Case {
    std::vector<std::string> args;
    int micro;
  };
  const std::vector<Case> cases = {
      {{"--momentum", "0.9", "--weight-decay", "0.01"}, 1},
      {{"--momentum", "0.9", "--weight-decay", "0.01", "--cuda-graph", "off"}, 1},
      {{"--optimizer", "adamw", "--weight-decay", "0.05", "--lr", "0.01"}, 1},
      {{"--optimizer", "adamw", "--weight-decay", "0.05", "--lr", "0.01", "--cuda-graph", "off"}, 1},
      {{"--optimizer", "adamw", "--precision", "bf16"}, 1},
      {{"--momentum", "0.9", "--grad-accum-steps", "2"}, 2},
  };
  const int steps = 6;  // graph on: step 0 eager, then replays waiting on sets 0, 1, 0, ...
  // Over the copy engines as well: its all-reduce and reduce-scatter sum the same two values
  // (a + b, commutative in fp32), times 1/2.
  for (const char* transport : {"nccl", "copy-engine"})
  for (const Case& c : cases) {
    Options od, oz;
    std::tie(od, oz) = ddp_and_zero(c.args, transport);
    od.checkpoint_every = oz.checkpoint_every = 1000;  // no GEMM autotuning: the same algorithms in both engines
    const auto buckets = run_buckets(od, L);
    REQUIRE(buckets.size() > 3);
    auto ddp = make_gpu_engine(od, w, L, buckets, nullptr);
    auto zero = make_gpu_engine(oz, w, L, buckets, nullptr);
    std::vector<std::vector<StepRecord>> recs;
    run_zero_steps({ddp.get(), zero.get()}, L, steps, c.micro, -1, &recs);
    INFO("--allreduce " << transport << ", " << to_string(oz.optimizer) << ", " << to_string(oz.precision)
                        << ", cuda graph " << oz.cuda_graph << ", " << c.micro << " micro-step(s)");
    for (int s = 0; s < steps; ++s) {
      INFO("step " << s);
      CHECK(recs[1][s].loss == recs[0][s].loss);  // bit for bit: no forward read a stale bucket
      for (size_t b = 0; b < buckets.size(); ++b) {
        // The all-gathers a step's forward waited for are the previous step's; all done before backward ends.
        CHECK(recs[1][s].buckets.allgather_bytes[b] == (s == 0 ? 0 : buckets[b].bytes()));
        if (s > 0) CHECK(recs[1][s].buckets.allgather_end_ms[b] <= recs[1][s].backward_end_ms);
      }
    }
    const std::vector<float> pz = zero->parameters(), pd = ddp->parameters();  // after the last all-gathers
    CHECK(pz == pd);
    const TrainState sd = ddp->train_state(), sz = zero->train_state();  // collective for the sharded engine
    if (w.rank == 0) {
      CHECK(sz.params == sd.params);
      for (size_t k = 0; k < sd.optimizer.size(); ++k) CHECK(sz.optimizer[k].second == sd.optimizer[k].second);
    }
  }
}

TEST_CASE("GPU engine, ZeRO-1 bf16 all-gather on 2 GPUs: both ranks' models read the bf16 rounds of the masters",
          "[gpu][mpi][zero]") {
  // --precision bf16 on 2 ranks: auto gathers bf16 (half the bytes). After every step, on each
  // rank, the model's bf16 copy is bf16(master) everywhere (its own chunks from its update, the
  // peer's through the all-gather) and the fp32-read parameters are float(bf16(master)); both
  // ranks hold the same model copies; the losses stay within bf16's tolerance of DDP's.
  const World w = test_world();
  REQUIRE(w.world_size == 2);
  const ParamLayout L = make_param_layout(vit_config("vit_micro"));
  for (const char* transport : {"nccl", "copy-engine"})
  for (std::vector<std::string> args :
       {std::vector<std::string>{"--momentum", "0.9", "--weight-decay", "0.01", "--precision", "bf16"},
        {"--optimizer", "adamw", "--precision", "bf16", "--cuda-graph", "off"}}) {
    args.insert(args.end(), {"--allreduce", transport});
    std::vector<std::string> za = args;
    za.push_back("--shard-optimizer");
    const Options od = zero_options("gpu", args), oz = zero_options("gpu", za);
    REQUIRE(allgather_in_bf16(oz, w.world_size));
    const auto buckets = run_buckets(od, L);
    auto ddp = make_gpu_engine(od, w, L, buckets, nullptr);
    auto zero = make_gpu_engine(oz, w, L, buckets, nullptr);
    std::vector<float> start;
    std::vector<uint16_t> bits;
    zero->diagnostics().model_parameters(&start, &bits);
    INFO(to_string(oz.optimizer) << ", cuda graph " << oz.cuda_graph << ", over " << transport);
    std::vector<std::vector<StepRecord>> rz, rd;
    for (int s = 0; s < 4; ++s) {
      INFO("step " << s);
      // One step at a time (each on run_zero_steps' first batch and learning rate).
      std::vector<std::vector<StepRecord>> one;
      run_zero_steps({zero.get()}, L, 1, 1, -1, &one);
      rz.push_back(one[0]);
      run_zero_steps({ddp.get()}, L, 1, 1, -1, &one);
      rd.push_back(one[0]);
      std::vector<float> masters = zero->parameters();  // collective: rank 0 gets them
      masters.resize(L.total);
      MPI_Bcast(masters.data(), (int)L.total, MPI_FLOAT, 0, MPI_COMM_WORLD);
      const vitddp_test::Bf16GatherCheck c = vitddp_test::check_bf16_gather(*zero, L, masters, start);
      CHECK(c.bf16 == 0);
      CHECK(c.fp32_read == 0);
      CHECK(c.untouched == 0);
      CHECK(c.fp32_read_elements > 0);
      // Identical replicas: rank 0's model copies broadcast and compared on rank 1.
      std::vector<float> f32, f32_0;
      std::vector<uint16_t> b16, b16_0;
      zero->diagnostics().model_parameters(&f32, &b16);
      f32_0 = f32;
      b16_0 = b16;
      MPI_Bcast(f32_0.data(), (int)f32_0.size() * 4, MPI_BYTE, 0, MPI_COMM_WORLD);
      MPI_Bcast(b16_0.data(), (int)b16_0.size() * 2, MPI_BYTE, 0, MPI_COMM_WORLD);
      CHECK(std::memcmp(f32.data(), f32_0.data(), f32.size() * 4) == 0);
      CHECK(b16 == b16_0);
      for (size_t b = 0; b < buckets.size(); ++b) CHECK(rz[s][0].buckets.allgather_bytes[b] == (s == 0 ? 0 : buckets[b].numel * 2));
    }
    for (int s = 0; s < 4; ++s) CHECK(rz[s][0].loss == Approx(rd[s][0].loss).epsilon(3e-2));
    const std::vector<float> pz = zero->parameters(), pd = ddp->parameters();  // collective for the sharded engine
    if (w.rank == 0) CHECK(max_abs_diff(pz, pd) < 1e-2);
  }
}

TEST_CASE("GPU engine, ZeRO-1: a NaN on rank 0 skips the step on both ranks; a full state loads and gathers back",
          "[gpu][mpi][zero]") {
  const World w = test_world();
  const ParamLayout L = make_param_layout(vit_config("vit_micro"));
  // Over the copy engines too: the agreement on the skip is its max_over_ranks there.
  for (const char* transport : {"nccl", "copy-engine"}) {
  INFO("over " << transport);
  const Options od = zero_options("gpu", {"--optimizer", "adamw", "--allreduce", transport}),
                oz = zero_options("gpu", {"--optimizer", "adamw", "--shard-optimizer", "--allreduce", transport});
  const auto buckets = run_buckets(od, L);
  auto ddp = make_gpu_engine(od, w, L, buckets, nullptr);
  auto zero = make_gpu_engine(oz, w, L, buckets, nullptr);
  run_zero_steps({ddp.get(), zero.get()}, L, 2, 1);
  const std::vector<float> before = zero->parameters();
  const auto rec = run_zero_steps({ddp.get(), zero.get()}, L, 1, 1, 0);
  CHECK(rec[0].nonfinite);
  CHECK(rec[1].nonfinite);
  CHECK(zero->parameters() == before);
  run_zero_steps({ddp.get(), zero.get()}, L, 2, 1);
  const TrainState sz = zero->train_state(), sd = ddp->train_state();
  CHECK(sz.optimizer_steps == 4);
  CHECK(sd.optimizer_steps == 4);
  CHECK(max_abs_diff(zero->parameters(), ddp->parameters()) <= 1e-6);
  // The DDP engine's full state into a new sharded engine: gathered back bit for bit, then both on alike.
  const TrainState full = ddp->train_state();
  auto again = make_gpu_engine(oz, w, L, buckets, nullptr);
  again->load_train_state(full);
  const TrainState back = again->train_state();
  if (w.rank == 0) {
    CHECK(back.params == full.params);
    CHECK(back.optimizer[0].second == full.optimizer[0].second);
    CHECK(back.optimizer[1].second == full.optimizer[1].second);
  }
  run_zero_steps({ddp.get(), again.get()}, L, 2, 1);
  CHECK(max_abs_diff(again->parameters(), ddp->parameters()) <= 1e-6);
  }
}

TEST_CASE("GPU engine, ZeRO-1: the memory estimate equals the allocations, the state is the shard's, no master copy",
          "[gpu][mpi][zero][memory]") {
  const World w = test_world();
  const ParamLayout L = make_param_layout(vit_config("vit_micro"));
  for (const char* transport : {"nccl", "copy-engine"})
  for (const char* opt : {"sgd", "adamw"}) {
    const bool adamw = std::string(opt) == "adamw";
    // --attention custom: cuDNN sizes its attention workspace itself (not in the estimate).
    const Options o = zero_options("gpu", {adamw ? "--optimizer" : "--momentum", adamw ? "adamw" : "0.9", "--attention",
                                           "custom", "--shard-optimizer", "--allreduce", transport});
    const auto buckets = run_buckets(o, L);
    const MemoryEstimate e = estimate_gpu_memory(o, L, buckets, w.world_size);
    auto engine = make_gpu_engine(o, w, L, buckets, nullptr);
    INFO(opt << " over " << transport << " on " << w.world_size << " ranks");
    CHECK(engine->info().device_bytes == e.persistent_bytes());
    const size_t slot = ShardPlan(buckets, w.world_size, w.rank).slot_numel() * sizeof(float);
    CHECK(e.bytes_of("optimizer state") == (adamw ? 2 : 1) * slot);
    CHECK(e.bytes_of("shard parameters") == 0);  // the update runs in place on the parameters
    CHECK(e.bytes_of("master shard") == 0);      // the fp32 all-gather keeps no masters
    // The bf16 all-gather adds this rank's fp32 master shard (--precision bf16: auto on 2 ranks).
    const Options ob = zero_options("gpu", {adamw ? "--optimizer" : "--momentum", adamw ? "adamw" : "0.9", "--attention",
                                            "custom", "--shard-optimizer", "--precision", "bf16", "--allgather-dtype",
                                            "bf16", "--allreduce", transport});
    const MemoryEstimate eb = estimate_gpu_memory(ob, L, buckets, w.world_size);
    CHECK(eb.bytes_of("master shard") == slot);
    auto bf16_engine = make_gpu_engine(ob, w, L, buckets, nullptr);
    CHECK(bf16_engine->info().device_bytes == eb.persistent_bytes());
  }
}
