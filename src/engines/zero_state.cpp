#include "src/engines/zero_state.h"

#include <mpi.h>

#include <climits>
#include <stdexcept>
#include <string>

#include "mpi/world/world.h"

namespace vitddp {

std::vector<OptimizerSegment> zero_segments(const ShardPlan& plan) {
  std::vector<OptimizerSegment> v;
  for (const ShardSlice& s : plan.slices())
    if (s.count > 0) v.push_back(OptimizerSegment{s.flat_offset, s.slot_offset, s.count});
  return v;
}

TrainState shard_of(const TrainState& full, const ShardPlan& plan) {
  TrainState s;
  s.params = full.params;
  for (const auto& [name, buf] : full.optimizer) {
    std::vector<float> part(plan.slot_numel());
    plan.take(buf.data(), part.data());
    s.optimizer.emplace_back(name, std::move(part));
  }
  s.optimizer_steps = full.optimizer_steps;
  return s;
}

namespace {

/// Rank 0: the flat buffer assembled from every rank's compact `part`; elsewhere: empty.
std::vector<float> gather_buffer(const std::vector<float>& part, const ShardPlan& plan, const std::string& what) {
  const size_t n = plan.slot_numel();
  if (part.size() != n)
    throw std::invalid_argument("gather_train_state: " + what + " holds " + std::to_string(part.size()) +
                                " elements, the shard has " + std::to_string(n));
  if (n > (size_t)INT_MAX) throw std::invalid_argument("gather_train_state: a shard of more than INT_MAX elements");
  const bool mpi = mpi_active();
  if (!mpi && plan.world_size() != 1)
    throw std::invalid_argument("gather_train_state: a shard of " + std::to_string(plan.world_size()) +
                                " ranks without MPI");
  std::vector<float> all(plan.rank() == 0 ? n * plan.world_size() : 0);
  if (mpi) {
    MPI_CHECK(MPI_Gather(part.data(), (int)n, MPI_FLOAT, all.data(), (int)n, MPI_FLOAT, 0, MPI_COMM_WORLD));
  } else {
    all = part;
  }
  if (plan.rank() != 0) return {};
  std::vector<float> full(plan.total(), 0.0f);
  plan.assemble(all.data(), full.data());
  return full;
}

}  // namespace

TrainState gather_train_state(const TrainState& shard, const ShardPlan& plan) {
  if (shard.params.size() != plan.total())
    throw std::invalid_argument("gather_train_state: params hold " + std::to_string(shard.params.size()) +
                                " elements, the model has " + std::to_string(plan.total()));
  TrainState full;
  if (plan.rank() == 0) full.params = shard.params;
  for (const auto& [name, buf] : shard.optimizer) full.optimizer.emplace_back(name, gather_buffer(buf, plan, name));
  full.optimizer_steps = shard.optimizer_steps;
  return full;
}

}  // namespace vitddp
