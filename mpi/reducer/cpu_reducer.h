// The CPU backend's reducer (CUDA-free): the Reducer core with gradients in host memory, the
// comm hook's work run on the host and its all-reduces by the MPI transport.
#pragma once
#include <chrono>
#include <memory>
#include <utility>
#include <vector>

#include "model/param_layout.h"
#include "mpi/buckets/bucket_times.h"
#include "mpi/buckets/buckets.h"
#include "mpi/buckets/shard_plan.h"
#include "mpi/hooks/comm_hook.h"
#include "mpi/hooks/powersgd_host.h"
#include "mpi/reducer/reducer.h"
#include "mpi/reducer/reducer_options.h"
#include "mpi/transports/host_transport.h"

namespace vitddp {

/// Same buckets, launch order and hooks as GpuReducer, gradients in host memory:
///  - none (and PowerSGD before its start step): each complete bucket is divided by world_size
///    and summed with MPI_Iallreduce(MPI_SUM) in place (DDP divides before the sum);
///  - fp16/bf16: cast (divided) into the bucket's 16-bit buffer, MPI_Iallreduce with a
///    user-defined op that adds pairs in fp32 and rounds back to 16 bits (what NCCL does per
///    reduction step), cast back in finalize();
///  - powersgd: PowerSgdHost with blocking MPI_Allreduce calls, run when the bucket launches;
///  - --shard-optimizer (ZeRO-1, options.shard_optimizer): each complete bucket is divided by
///    world_size and reduce-scattered in place with MPI_Ireduce_scatter(MPI_IN_PLACE, MPI_SUM):
///    this rank's chunk of the bucket (shard_plan()) then holds the average, the other chunks are
///    undefined; all_gather() brings every rank's updated chunks back into the parameters.
/// finalize() waits for all requests in bucket order (running the hooks' then() work), copies the
/// bucket buffer back (grad_as_bucket_view=false) and counts the step for PowerSGD.
/// Timings: host clock, relative to prepare_for_backward's `step_start`.
class CpuReducer : private ReducerBackend, private HookBackend {
 public:
  /// `grads`: layout.total host floats. With options.shard_optimizer this rank's shard is the
  /// ShardPlan of the buckets on world_size ranks (the rank from MPI); no buffer of its own.
  /// Throws std::runtime_error on MPI failure, std::invalid_argument
  /// for an unknown compression, a compression without a sharded form, sharding with
  /// grad_as_bucket_view=false, bad PowerSGD options or a bucket of more than INT_MAX elements.
  CpuReducer(const ParamLayout& layout, std::vector<Bucket> buckets, float* grads, int world_size,
             const ReducerOptions& options = ReducerOptions());
  ~CpuReducer() override;
  CpuReducer(const CpuReducer&) = delete;
  CpuReducer& operator=(const CpuReducer&) = delete;

  void prepare_for_backward(std::chrono::steady_clock::time_point step_start);
  void mark_ready(const std::vector<size_t>& params) { core_.mark_ready(params); }
  void finalize() { core_.finalize(); }
  BucketTimes times() const;
  const std::vector<Bucket>& buckets() const { return core_.buckets(); }
  const ReducerOptions& options() const { return opts_; }
  /// The PowerSGD state (null unless compression == "powersgd"), for its iteration counter and error.
  const PowerSgdHost* powersgd() const { return powersgd_; }

  // ---- ZeRO-1 (--shard-optimizer); null / throwing without options.shard_optimizer
  /// This rank's shard of the buckets: after finalize(), the averaged gradients of its slices
  /// (ShardSlice::flat_offset, count) in the gradient buffer.
  const ShardPlan* shard_plan() const { return shard_.get(); }
  /// After the shard's update, in place: every rank's chunk of each bucket of `params`
  /// (layout.total floats; ShardPlan::slice_of) is gathered into the same place on every rank, one
  /// MPI_Iallgatherv(MPI_IN_PLACE) per bucket, started in bucket order and waited for in that
  /// order; times() then holds each bucket's all-gather. Collective. Throws std::logic_error
  /// without sharding, std::runtime_error on MPI failure.
  void all_gather(float* params);

 private:
  class HostBucket;
  GradBucket& start_bucket(size_t b) override;
  void finish_buckets() override;
  std::unique_ptr<PowerSgdState> make_powersgd(const std::vector<HookBucket>& buckets,
                                               const PowerSgdOptions& options) override;
  size_t planned_powersgd_bytes(const std::vector<HookBucket>&, const PowerSgdOptions&) const override { return 0; }
  double now_ms() const;

  Reducer core_;
  float* grads_;
  int world_size_;
  ReducerOptions opts_;
  std::vector<HookBucket> hook_buckets_;
  std::unique_ptr<HostTransport> transport_;
  std::unique_ptr<CommHook> hook_;
  std::vector<std::unique_ptr<HostBucket>> bucket_;
  std::vector<float> bucket_buf_;  ///< grad_as_bucket_view=false
  std::vector<double> copy_ms_;    ///< per bucket, this step
  const PowerSgdHost* powersgd_ = nullptr;
  std::chrono::steady_clock::time_point step_start_;
  std::unique_ptr<ShardPlan> shard_;
  std::vector<std::vector<std::pair<size_t, size_t>>> padding_;  ///< ZeRO-1: per bucket, its layout padding
  BucketTimes gather_;  ///< the all-gather fields of this step (all_gather)
};

}  // namespace vitddp
