// ZeRO stage 1's training state across the ranks (CUDA-free, both engines): the segments of the
// flat buffers a rank's optimizer updates, a rank's compact shard of a full TrainState (--resume
// into any rank count), and the full state gathered from every rank's shard (checkpoints). Shards
// follow mpi/buckets/shard_plan.h. The optimizer state is always sharded; the fp32 parameters are
// whole on every rank with the fp32 all-gather (the model reads them) and a compact master shard
// with the bf16 all-gather (--allgather-dtype bf16: the model reads bf16 rounds of them).
#pragma once
#include <functional>
#include <vector>

#include "mpi/buckets/shard_plan.h"
#include "src/engines/optimizer.h"
#include "src/engines/train_state.h"

namespace vitddp {

/// Where a ZeRO-1 rank keeps the fp32 parameters its optimizer updates.
enum class MasterParams {
  Full,   ///< the whole flat buffer (plan.total() floats, the same on every rank after the fp32 all-gather)
  Shard,  ///< this rank's compact master shard (plan.slot_numel() floats, padding 0; the bf16 all-gather)
};

/// The optimizer segments of this rank's shard, one per bucket it owns elements of, in bucket
/// order, from each ShardSlice with count > 0: gradients at flat_offset of the flat gradient
/// buffer, state at slot_offset of the compact state (plan.slot_numel() elements, padding
/// untouched), parameters at flat_offset of the flat parameter buffer (MasterParams::Full: the
/// update runs in place on this rank's chunk of each bucket) or at slot_offset of the compact
/// master shard (MasterParams::Shard).
std::vector<OptimizerSegment> zero_segments(const ShardPlan& plan, MasterParams masters = MasterParams::Full);

/// This rank's part of the full state `full` (which passed check_train_state): params kept whole
/// (MasterParams::Full) or cut by plan.take into plan.slot_numel() floats (Shard), every
/// optimizer buffer cut by plan.take (padding 0), names and optimizer_steps kept.
TrainState shard_of(const TrainState& full, const ShardPlan& plan, MasterParams masters = MasterParams::Full);

/// Collective over MPI_COMM_WORLD (one MPI_Gather per sharded buffer; every rank calls it): the
/// full state assembled on rank 0 from every rank's `shard`. params: MasterParams::Full, the
/// shard's own (the whole flat parameter buffer, plan.total() floats, the same on every rank once
/// the fp32 all-gathers are done); Shard, assembled from every rank's compact master shard
/// (plan.slot_numel() floats per rank) like the optimizer buffers. Each optimizer buffer is
/// assembled from every rank's compact one (plan.slot_numel() floats per rank, the same names in
/// the same order on every rank). Rank 0 gets the full state, the other ranks a TrainState with
/// empty buffers and the same optimizer_steps. Without MPI (one process, not launched by mpirun)
/// plan must be of one rank and the state is assembled locally. Throws std::invalid_argument for
/// a buffer of the wrong size, std::runtime_error on MPI failure.
TrainState gather_train_state(const TrainState& shard, const ShardPlan& plan,
                              MasterParams masters = MasterParams::Full);
/// The same with the local state read by `local` (a device download, host copies): its errors, the
/// size checks and rank 0's allocations are agreed across the ranks (MPI_Allreduce) before the
/// first MPI_Gather, so a failure on any rank throws std::runtime_error on every rank (its own
/// message where it happened) instead of leaving the others in a collective.
TrainState gather_train_state(const std::function<TrainState()>& local, const ShardPlan& plan,
                              MasterParams masters = MasterParams::Full);

}  // namespace vitddp
