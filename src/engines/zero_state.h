// ZeRO stage 1's training state across the ranks (CUDA-free, both engines): a rank's compact
// shard of a full TrainState (--resume into any rank count), and the full state gathered from
// every rank's shard (checkpoints). Shards follow mpi/buckets/shard_plan.h.
#pragma once
#include "mpi/buckets/shard_plan.h"
#include "src/engines/train_state.h"

namespace vitddp {

/// This rank's shard of the full state `full` (which passed check_train_state): params and every
/// optimizer buffer cut by plan.take into plan.slot_numel() floats each (padding 0), names and
/// optimizer_steps kept.
TrainState shard_of(const TrainState& full, const ShardPlan& plan);

/// Collective over MPI_COMM_WORLD (one MPI_Gather per buffer; every rank calls it): the full state
/// (params and optimizer buffers of plan.total() floats, flat layout) assembled on rank 0 from every
/// rank's compact `shard` (params: the rank's master shard; plan.slot_numel() floats per buffer,
/// the same names in the same order on every rank). Rank 0 gets the full state, the other ranks a
/// TrainState with empty buffers and the same optimizer_steps. Without MPI (one process, not
/// launched by mpirun) plan must be of one rank and the state is assembled locally. Throws
/// std::invalid_argument for a buffer of the wrong size, std::runtime_error on MPI failure.
TrainState gather_train_state(const TrainState& shard, const ShardPlan& plan);

}  // namespace vitddp
