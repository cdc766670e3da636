#include "src/engines/zero_state.h"

#include <mpi.h>

#include <climits>
#include <functional>
#include <stdexcept>
#include <string>

#include "mpi/world/world.h"

namespace vitddp {

std::vector<OptimizerSegment> zero_segments(const ShardPlan& plan, MasterParams masters) {
  std::vector<OptimizerSegment> v;
  for (const ShardSlice& s : plan.slices())
    if (s.count > 0)
      v.push_back(OptimizerSegment{masters == MasterParams::Full ? s.flat_offset : s.slot_offset, s.flat_offset,
                                   s.slot_offset, s.count});
  return v;
}

TrainState shard_of(const TrainState& full, const ShardPlan& plan, MasterParams masters) {
  const auto cut = [&plan](const std::vector<float>& buf) {
    std::vector<float> part(plan.slot_numel());
    plan.take(buf.data(), part.data());
    return part;
  };
  TrainState s;
  s.params = masters == MasterParams::Full ? full.params : cut(full.params);
  for (const auto& [name, buf] : full.optimizer) s.optimizer.emplace_back(name, cut(buf));
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

TrainState gather_train_state(const std::function<TrainState()>& local, const ShardPlan& plan, MasterParams masters) {
  const bool sharded_params = masters == MasterParams::Shard;
  const size_t n = plan.slot_numel();
  TrainState shard;
  // The compact buffers gathered, in order: the master shard (MasterParams::Shard) first, then
  // the optimizer buffers; rank 0 receives every rank's copy of each.
  std::vector<const std::vector<float>*> parts;
  std::vector<std::vector<float>> all;
  std::string error;
  try {
    shard = local();
    const size_t want = sharded_params ? n : plan.total();
    if (shard.params.size() != want)
      throw std::invalid_argument("gather_train_state: params hold " + std::to_string(shard.params.size()) +
                                  " elements, expected " + std::to_string(want) +
                                  (sharded_params ? " (the master shard)" : " (the model)"));
    if (n > (size_t)INT_MAX) throw std::invalid_argument("gather_train_state: a shard of more than INT_MAX elements");
    if (!mpi_active() && plan.world_size() != 1)
      throw std::invalid_argument("gather_train_state: a shard of " + std::to_string(plan.world_size()) +
                                  " ranks without MPI");
    if (sharded_params) parts.push_back(&shard.params);
    for (const auto& [name, buf] : shard.optimizer) {
      if (buf.size() != n)
        throw std::invalid_argument("gather_train_state: " + name + " holds " + std::to_string(buf.size()) +
                                    " elements, the shard has " + std::to_string(n));
      parts.push_back(&buf);
    }
    for (size_t k = 0; k < parts.size(); ++k) all.emplace_back(plan.rank() == 0 ? n * plan.world_size() : 0);
  } catch (const std::exception& e) {
    error = e.what()[0] ? e.what() : "gather_train_state: failed";
  }
  agree_before_gather(error);
  std::vector<std::vector<float>> flat(parts.size());
  for (size_t k = 0; k < parts.size(); ++k) {
    if (mpi_active()) {
      MPI_CHECK(MPI_Gather(parts[k]->data(), (int)n, MPI_FLOAT, all[k].data(), (int)n, MPI_FLOAT, 0, MPI_COMM_WORLD));
    } else {
      all[k] = *parts[k];
    }
    if (plan.rank() == 0) {
      flat[k].assign(plan.total(), 0.0f);
      plan.assemble(all[k].data(), flat[k].data());
      std::vector<float>().swap(all[k]);
    }
  }
  TrainState full;
  size_t k = 0;
  if (sharded_params) full.params = std::move(flat[k++]);
  else if (plan.rank() == 0) full.params = shard.params;
  for (const auto& b : shard.optimizer) full.optimizer.emplace_back(b.first, std::move(flat[k++]));
  full.optimizer_steps = shard.optimizer_steps;
  return full;
}

TrainState gather_train_state(const TrainState& shard, const ShardPlan& plan, MasterParams masters) {
  return gather_train_state([&shard] { return shard; }, plan, masters);
}

}  // namespace vitddp
