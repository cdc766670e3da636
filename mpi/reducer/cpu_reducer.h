// The CPU backend's reducer (CUDA-free): the Reducer core with gradients in host memory, the
// comm hook's work run on the host and its all-reduces by the MPI transport.
#pragma once
#include <chrono>
#include <memory>
#include <vector>

#include "model/param_layout.h"
#include "mpi/buckets/bucket_times.h"
#include "mpi/buckets/buckets.h"
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
///  - powersgd: PowerSgdHost with blocking MPI_Allreduce calls, run when the bucket launches.
/// finalize() waits for all requests in bucket order (running the hooks' then() work), copies the
/// bucket buffer back (grad_as_bucket_view=false) and counts the step for PowerSGD.
/// Timings: host clock, relative to prepare_for_backward's `step_start`.
class CpuReducer : private ReducerBackend, private HookBackend {
 public:
  /// `grads`: layout.total host floats. Throws std::runtime_error on MPI failure,
  /// std::invalid_argument for an unknown compression, bad PowerSGD options or a bucket of more
  /// than INT_MAX elements.
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
};

}  // namespace vitddp
