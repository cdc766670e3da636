#include "src/engines/zero_state.h"

#include <mpi.h>

#include <climits>
#include <functional>
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

/// Throws unless every rank's `local_error` is empty: the ranks agree (all_ranks_ok) before any
/// gather, so a failure on one rank (its device read, an allocation, a size check) ends the call
/// on every rank instead of leaving the others inside MPI_Gather.
void agree_before_gather(const std::string& local_error) {
  const bool ok = all_ranks_ok(local_error.empty());
  if (!local_error.empty()) throw std::runtime_error(local_error);
  if (!ok) throw std::runtime_error("gather_train_state: the optimizer state could not be read on another rank");
}

}  // namespace

TrainState gather_train_state(const std::function<TrainState()>& local, const ShardPlan& plan) {
  TrainState shard;
  std::vector<std::vector<float>> all;  // rank 0: every rank's compact buffers, per state buffer
  std::string error;
  try {
    shard = local();
    if (shard.params.size() != plan.total())
      throw std::invalid_argument("gather_train_state: params hold " + std::to_string(shard.params.size()) +
                                  " elements, the model has " + std::to_string(plan.total()));
    const size_t n = plan.slot_numel();
    if (n > (size_t)INT_MAX) throw std::invalid_argument("gather_train_state: a shard of more than INT_MAX elements");
    if (!mpi_active() && plan.world_size() != 1)
      throw std::invalid_argument("gather_train_state: a shard of " + std::to_string(plan.world_size()) +
                                  " ranks without MPI");
    for (const auto& [name, buf] : shard.optimizer) {
      if (buf.size() != n)
        throw std::invalid_argument("gather_train_state: " + name + " holds " + std::to_string(buf.size()) +
                                    " elements, the shard has " + std::to_string(n));
      all.emplace_back(plan.rank() == 0 ? n * plan.world_size() : 0);
    }
  } catch (const std::exception& e) {
    error = e.what()[0] ? e.what() : "gather_train_state: failed";
  }
  agree_before_gather(error);
  TrainState full;
  if (plan.rank() == 0) full.params = shard.params;
  const size_t n = plan.slot_numel();
  for (size_t k = 0; k < shard.optimizer.size(); ++k) {
    const auto& [name, part] = shard.optimizer[k];
    if (mpi_active()) {
      MPI_CHECK(MPI_Gather(part.data(), (int)n, MPI_FLOAT, all[k].data(), (int)n, MPI_FLOAT, 0, MPI_COMM_WORLD));
    } else {
      all[k] = part;
    }
    std::vector<float> flat;
    if (plan.rank() == 0) {
      flat.assign(plan.total(), 0.0f);
      plan.assemble(all[k].data(), flat.data());
      std::vector<float>().swap(all[k]);
    }
    full.optimizer.emplace_back(name, std::move(flat));
  }
  full.optimizer_steps = shard.optimizer_steps;
  return full;
}

TrainState gather_train_state(const TrainState& shard, const ShardPlan& plan) {
  return gather_train_state([&shard] { return shard; }, plan);
}

}  // namespace vitddp
