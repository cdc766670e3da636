// ZeRO stage 1's training state across the ranks (CUDA-free, both engines): the segments of the
// flat buffers a rank's optimizer updates, a rank's compact shard of a full TrainState's optimizer
// state (--resume into any rank count), and the full state gathered from every rank's shard
// (checkpoints). Shards follow mpi/buckets/shard_plan.h. Every rank holds all parameters (the
// model reads them), so only the optimizer state is sharded.
#pragma once
#include <functional>
#include <vector>

#include "mpi/buckets/shard_plan.h"
#include "src/engines/optimizer.h"
#include "src/engines/train_state.h"

namespace vitddp {

/// The optimizer segments of this rank's shard, one per bucket it owns elements of, in bucket
/// order: {flat_offset, slot_offset, count} of each ShardSlice with count > 0. The update then
/// runs in place on the flat parameter and gradient buffers (this rank's chunk of each bucket)
/// with the state compact (plan.slot_numel() elements, padding untouched).
std::vector<OptimizerSegment> zero_segments(const ShardPlan& plan);

/// This rank's part of the full state `full` (which passed check_train_state): params kept whole,
/// every optimizer buffer cut by plan.take into plan.slot_numel() floats (padding 0), names and
/// optimizer_steps kept.
TrainState shard_of(const TrainState& full, const ShardPlan& plan);

/// Collective over MPI_COMM_WORLD (one MPI_Gather per optimizer buffer; every rank calls it): the
/// full state assembled on rank 0 from every rank's `shard`: params are the shard's own (the whole
/// flat parameter buffer, plan.total() floats, the same on every rank once the all-gathers are
/// done), each optimizer buffer is assembled from every rank's compact one (plan.slot_numel()
/// floats per rank, the same names in the same order on every rank). Rank 0 gets the full state,
/// the other ranks a TrainState with empty buffers and the same optimizer_steps. Without MPI (one
/// process, not launched by mpirun) plan must be of one rank and the state is assembled locally.
/// Throws std::invalid_argument for a buffer of the wrong size, std::runtime_error on MPI failure.
TrainState gather_train_state(const TrainState& shard, const ShardPlan& plan);
/// The same with the local state read by `local` (a device download, host copies): its errors, the
/// size checks and rank 0's allocations are agreed across the ranks (MPI_Allreduce) before the
/// first MPI_Gather, so a failure on any rank throws std::runtime_error on every rank (its own
/// message where it happened) instead of leaving the others in a collective.
TrainState gather_train_state(const std::function<TrainState()>& local, const ShardPlan& plan);

}  // namespace vitddp
