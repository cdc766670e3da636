// ZeRO stage 1 on the CPU backend (--shard-optimizer) under `mpirun -np N`, any N (ctest runs
// them on 2, 3 and 4 ranks; vit_micro's buckets are multiples of 4 elements, so 3 ranks give
// uneven chunks): the reducer's reduce-scatter and all-gather against hand-computed averages, the
// sharded engine against the DDP engine (SGD with momentum, AdamW, gradient accumulation, a
// non-finite step), the full training state gathered and re-sharded, and the memory estimate.
#include <malloc.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "model/param_layout.h"
#include "mpi/buckets/shard_plan.h"
#include "mpi/reducer/cpu_reducer.h"
#include "src/engines/engine.h"
#include "src/engines/memory_estimate.h"
#include "src/engines/optimizer.h"
#include "tests/catch.h"
#include "tests/mpi_test_util.h"
#include "tests/test_util.h"
#include "tests/zero_check.h"

using namespace vitddp;
using vitddp_test::parse_args;
using vitddp_test::world_rank;
using vitddp_test::world_size;
using vitddp_test::max_abs_diff;

using vitddp_test::run_zero_steps;
using vitddp_test::node_world;

namespace {

/// vit_micro's buckets with tiny caps: several buckets, the first a single small tensor.
std::vector<Bucket> micro_buckets(const ParamLayout& L) { return assign_buckets(L, 16, 600); }

Options engine_options(const std::vector<std::string>& extra) { return vitddp_test::zero_options("cpu", extra); }

}  // namespace

TEST_CASE("ZeRO-1 reducer: each rank's chunks hold their average in place; the all-gather rebuilds every bucket",
          "[mpi][zero][reducer]") {
  const int n = world_size(), r = world_rank();
  const ParamLayout L = make_param_layout(vit_config("vit_micro"));
  const auto buckets = micro_buckets(L);
  REQUIRE(buckets.size() > 3);
  // Rank q holds (q + 1) * (i % 7 + 1) at element i: the average is (n + 1) / 2 * (i % 7 + 1).
  std::vector<float> grads(L.total);
  for (size_t i = 0; i < L.total; ++i) grads[i] = (float)((r + 1) * (int)(i % 7 + 1));
  ReducerOptions ro;
  ro.shard_optimizer = true;
  CpuReducer reducer(L, buckets, grads.data(), n, ro);
  const ShardPlan& plan = *reducer.shard_plan();
  REQUIRE(plan.rank() == r);
  reducer.prepare_for_backward(std::chrono::steady_clock::now());
  const auto order = L.ready_order();
  for (size_t i = 0; i < order.size(); i += 2)
    reducer.mark_ready(std::vector<size_t>(order.begin() + i, order.begin() + std::min(order.size(), i + 2)));
  reducer.finalize();
  // Layout padding (no tensor's element) is zeroed before the in-place reduce-scatter: it averages to 0.
  std::vector<char> in_tensor(L.total, 0);
  for (const ParamInfo& p : L.params) std::fill(in_tensor.begin() + p.offset, in_tensor.begin() + p.offset + p.numel, 1);
  size_t checked = 0;
  for (const ShardSlice& s : plan.slices()) {
    for (size_t j = 0; j < s.count; ++j) {
      const size_t i = s.flat_offset + j;
      // (sum over q of (q + 1) k / n) in float: every term k (q + 1) / n is exact enough at
      // these sizes; compare with a relative bound of a few ulps.
      const double expect = in_tensor[i] ? (n + 1) / 2.0 * (double)(i % 7 + 1) : 0.0;
      REQUIRE(std::fabs(grads[i] - expect) <= 4e-7 * expect);  // in place: the chunk's own elements
      ++checked;
    }
  }
  CHECK(checked == plan.numel());
  BucketTimes t = reducer.times();
  for (size_t b = 0; b < buckets.size(); ++b) {
    CHECK(t.reduce_scattered[b] == 1);
    CHECK(t.bytes_sent[b] == buckets[b].bytes());
    CHECK(t.allgather_bytes[b] == 0);  // no all-gather yet
  }

  // All-gather in place: each rank's chunks of the parameters hold 1000 (owner rank) + element
  // index, the rest -7 (what the other ranks' chunks must overwrite).
  std::vector<float> params(L.total, -7.0f);
  for (const ShardSlice& s : plan.slices())
    for (size_t j = 0; j < s.count; ++j) params[s.flat_offset + j] = (float)(1000 * r + s.flat_offset + j);
  reducer.all_gather(params.data());
  for (int q = 0; q < n; ++q)
    for (size_t b = 0; b < buckets.size(); ++b) {
      const ShardSlice s = plan.slice_of(b, q);
      for (size_t j = 0; j < s.count; ++j) REQUIRE(params[s.flat_offset + j] == (float)(1000 * q + s.flat_offset + j));
    }
  t = reducer.times();
  for (size_t b = 0; b < buckets.size(); ++b) {
    CHECK(t.allgather_bytes[b] == buckets[b].bytes());
    CHECK(t.allgather_end_ms[b] >= t.allgather_start_ms[b]);
    CHECK(t.allgather_start_ms[b] > 0);
  }
}

TEST_CASE("ZeRO-1 engine equals the DDP engine: SGD with momentum and AdamW, with and without accumulation",
          "[mpi][zero][engine]") {
  const ParamLayout L = make_param_layout(vit_config("vit_micro"));
  const World w = node_world();
  struct Case {
    std::vector<std::string> args;
    int micro;
  };
  const std::vector<Case> cases = {
      {{"--momentum", "0.9", "--weight-decay", "0.01"}, 1},
      {{"--optimizer", "adamw", "--weight-decay", "0.05", "--lr", "0.01"}, 1},
      {{"--momentum", "0.9", "--grad-accum-steps", "2"}, 2},
      {{"--optimizer", "adamw", "--grad-accum-steps", "2"}, 2},
  };
  for (const Case& c : cases) {
    std::vector<std::string> zero_args = c.args;
    zero_args.push_back("--shard-optimizer");
    const Options od = engine_options(c.args), oz = engine_options(zero_args);
    const auto buckets = run_buckets(od, L);
    auto ddp = make_cpu_engine(od, w, L, buckets, nullptr);
    auto zero = make_cpu_engine(oz, w, L, buckets, nullptr);
    const std::vector<float> p0 = ddp->parameters();
    REQUIRE(zero->parameters() == p0);
    const auto recs = run_zero_steps({ddp.get(), zero.get()}, L, 4, c.micro);
    INFO(to_string(oz.optimizer) << ", " << c.micro << " micro-step(s), " << w.world_size << " ranks");
    const double d = max_abs_diff(zero->parameters(), ddp->parameters());
    CHECK(d <= 1e-6);
    CHECK(max_abs_diff(ddp->parameters(), p0) > 1e-3);  // the comparison is not vacuous
    CHECK(recs[1].loss == recs[0].loss);
    for (size_t b = 0; b < buckets.size(); ++b) {
      CHECK(recs[1].buckets.reduce_scattered[b] == 1);
      CHECK(recs[0].buckets.reduce_scattered[b] == 0);
      CHECK(recs[1].buckets.allgather_bytes[b] == buckets[b].bytes());
      CHECK(recs[1].buckets.bytes_sent[b] == recs[0].buckets.bytes_sent[b]);
    }
    // The full state, gathered on rank 0 (collective: every rank calls it).
    const TrainState sd = ddp->train_state(), sz = zero->train_state();
    CHECK(sz.optimizer_steps == sd.optimizer_steps);
    if (w.rank == 0) {
      REQUIRE(sz.optimizer.size() == sd.optimizer.size());
      CHECK(max_abs_diff(sz.params, sd.params) <= 1e-6);
      for (size_t k = 0; k < sd.optimizer.size(); ++k) {
        CHECK(sz.optimizer[k].first == sd.optimizer[k].first);
        CHECK(max_abs_diff(sz.optimizer[k].second, sd.optimizer[k].second) <= 1e-5);
      }
    } else {
      CHECK(sz.params.empty());
    }
  }
}

TEST_CASE("ZeRO-1 engine: a non-finite step on one rank is skipped on every rank, as DDP skips it",
          "[mpi][zero][engine]") {
  const ParamLayout L = make_param_layout(vit_config("vit_micro"));
  const World w = node_world();
  const Options od = engine_options({"--optimizer", "adamw"}), oz = engine_options({"--optimizer", "adamw", "--shard-optimizer"});
  const auto buckets = run_buckets(od, L);
  auto ddp = make_cpu_engine(od, w, L, buckets, nullptr);
  auto zero = make_cpu_engine(oz, w, L, buckets, nullptr);
  run_zero_steps({ddp.get(), zero.get()}, L, 2, 1);
  const std::vector<float> before = zero->parameters();
  const auto poisoned = run_zero_steps({ddp.get(), zero.get()}, L, 1, 1, 0);  // rank 0's batch holds a NaN
  CHECK(poisoned[0].nonfinite);
  CHECK(poisoned[1].nonfinite);  // on every rank, though only rank 0's loss is NaN
  CHECK(zero->parameters() == before);  // nothing applied, nothing all-gathered
  for (size_t b = 0; b < buckets.size(); ++b) CHECK(poisoned[1].buckets.allgather_bytes[b] == 0);
  run_zero_steps({ddp.get(), zero.get()}, L, 2, 1);
  const TrainState sz = zero->train_state(), sd = ddp->train_state();
  CHECK(sz.optimizer_steps == 4);  // 5 steps, the skipped one not counted
  CHECK(sd.optimizer_steps == 4);
  CHECK(max_abs_diff(zero->parameters(), ddp->parameters()) <= 1e-6);
}

TEST_CASE("ZeRO-1 engine: a full state loads into this rank count's shards and gathers back bit for bit",
          "[mpi][zero][engine][checkpoint]") {
  // A state as a checkpoint of any rank count (sharded or not) holds it: full buffers.
  const ParamLayout L = make_param_layout(vit_config("vit_micro"));
  const World w = node_world();
  const Options od = engine_options({"--optimizer", "adamw"}), oz = engine_options({"--optimizer", "adamw", "--shard-optimizer"});
  const auto buckets = run_buckets(od, L);
  TrainState full;
  full.params = vitddp_test::random_params(L, 41);
  std::vector<float> m = vitddp_test::random_params(L, 42), v = vitddp_test::random_params(L, 43);
  for (float& x : v) x = x * x;  // a second moment is >= 0
  full.optimizer = {{"exp_avg", m}, {"exp_avg_sq", v}};
  full.optimizer_steps = 7;
  auto zero = make_cpu_engine(oz, w, L, buckets, nullptr);
  auto ddp = make_cpu_engine(od, w, L, buckets, nullptr);
  zero->load_train_state(full);
  ddp->load_train_state(full);
  CHECK(zero->parameters() == full.params);
  const TrainState back = zero->train_state();
  CHECK(back.optimizer_steps == 7);
  if (w.rank == 0) {
    CHECK(back.params == full.params);
    REQUIRE(back.optimizer.size() == 2);
    CHECK(back.optimizer[0].first == "exp_avg");
    CHECK(back.optimizer[0].second == m);
    CHECK(back.optimizer[1].second == v);
  }
  // Both continue from it alike (AdamW's step 8 onwards).
  run_zero_steps({ddp.get(), zero.get()}, L, 3, 1);
  CHECK(max_abs_diff(zero->parameters(), ddp->parameters()) <= 1e-6);
  CHECK(max_abs_diff(zero->parameters(), full.params) > 1e-4);
  const TrainState sz = zero->train_state(), sd = ddp->train_state();
  CHECK(sz.optimizer_steps == 10);
  if (w.rank == 0) CHECK(max_abs_diff(sz.optimizer[1].second, sd.optimizer[1].second) <= 1e-6);
}

TEST_CASE("ZeRO-1 memory: the estimate's sharded state equals what the engine allocates; no master copy",
          "[mpi][zero][memory]") {
  const ParamLayout L = make_param_layout(vit_config("vit_tiny", 10));
  const World w = node_world();
  for (const char* opt : {"sgd", "adamw"}) {
    const bool adamw = std::string(opt) == "adamw";
    const Options o = parse_args({"--backend", "cpu", "--model", "vit_tiny", "--num-classes", "10", "--batch-size", "4",
                                  "--first-bucket-mb", "0.01", "--bucket-cap-mb", "0.1", adamw ? "--optimizer" : "--momentum",
                                  adamw ? "adamw" : "0.9", "--shard-optimizer"});
    const auto buckets = run_buckets(o, L);
    const ShardPlan plan(buckets, w.world_size, w.rank);
    const MemoryEstimate e = estimate_cpu_memory(o, L, buckets, w.world_size);
    INFO(opt << " on " << w.world_size << " ranks");
    const size_t s = plan.slot_numel() * sizeof(float);
    CHECK(e.bytes_of("optimizer state") == (adamw ? 2 : 1) * s);
    CHECK(e.bytes_of("shard parameters") == 0);  // the update runs in place on the parameters
    CHECK(e.bytes_of("reducer") == 0);           // the collectives run in place
    // DDP's parameters and gradients, 4 bytes each per element, as without sharding.
    CHECK(e.bytes_of("parameters") == 4 * L.total);
    CHECK(e.bytes_of("gradients") == 4 * L.total);
    auto in_use = [] {
      const struct mallinfo2 m = mallinfo2();
      return m.uordblks + m.hblkhd;
    };
    const size_t before = in_use();
    const auto engine = make_cpu_engine(o, w, L, buckets, nullptr);
    const size_t grown = in_use() - before;
    CHECK(e.bytes_of("parameters") + e.bytes_of("gradients") + e.bytes_of("optimizer state") ==
          engine->info().device_bytes);
    // Everything the engine keeps: the estimate's items but the data workers' ring.
    const size_t expect = e.persistent_bytes() - e.bytes_of("data workers");
    INFO("estimate " << expect << " bytes, heap grew by " << grown);
    CHECK(grown >= expect);
    CHECK(grown <= expect + expect / 50);
  }
}
