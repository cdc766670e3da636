// PowerSGD on the GPU: PyTorch's powerSGD_hook over NCCL, enqueued on the reducer's comm stream.
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>
#include <vector>

#include "cuda/compression.h"
#include "cuda/device_buffer.h"
#include "mpi/bucket_timeline_gpu.h"
#include "mpi/comm_hooks.h"
#include "mpi/powersgd.h"

namespace vitddp {

/// The PowerSGD comm hook for every bucket of a model, on one GPU, with its device state (error
/// per bucket, P and Q memories) and the iteration counter. Same algorithm, order of all-reduce
/// calls and initial Qs as PowerSgdHost (mpi/powersgd.h), in fp32 kernels (cuda/compression.h).
///
/// All work goes to `stream` (the reducer's comm stream); state buffers are allocated in the
/// constructor (error: one float per bucket element when error feedback is on). Scratch buffers
/// are shared by all buckets, which is safe because one stream runs them in order.
class PowerSgdNccl {
 public:
  /// Throws std::invalid_argument for bad options, std::runtime_error on CUDA failure.
  PowerSgdNccl(std::vector<HookBucket> buckets, const PowerSgdOptions& options, ncclComm_t comm, int world_size,
               cudaStream_t stream);

  /// True when the next run_bucket compresses (iteration >= start_iter); before that the reducer
  /// runs its plain all-reduce.
  bool compressing() const { return iter_ >= opts_.start_iter; }
  /// Enqueues the compressed hook for bucket `b` on the stream: `d_data` is the bucket's
  /// plan(b).numel device floats, reduced in place. Events and bytes go to `tl` (reset by the caller).
  /// Requires compressing().
  void run_bucket(size_t b, float* d_data, BucketTimeline& tl);
  /// Increases the iteration counter (once per step, after the last bucket).
  void end_step() { ++iter_; }

  int64_t iteration() const { return iter_; }
  const PowerSgdBucketPlan& plan(size_t b) const { return plans_.at(b); }
  /// Device bytes held (state and scratch).
  size_t device_bytes() const;
  /// Device bytes a PowerSgdNccl built from `buckets` and `options` holds (device_bytes() of the
  /// new object; the constructor checks the two agree), computed without any CUDA call. Throws
  /// std::invalid_argument as make_powersgd_plan.
  static size_t planned_device_bytes(const std::vector<HookBucket>& buckets, const PowerSgdOptions& options);
  /// Copies bucket b's local error to the host after synchronising the stream (tests).
  std::vector<float> error_to_host(size_t b) const;

 private:
  struct BucketState {
    DeviceBuffer<float> error, p, q;
    DeviceBuffer<CopySegment> gather, scatter;  ///< uncompressed tensors: bucket -> u, u -> bucket
    DeviceBuffer<MatrixRef> p_refs, q_refs;     ///< compressed tensors' Ps (n x r) and Qs (m x r)
    size_t max_segment = 0;
    bool q_ready = false;
  };
  void init_q(size_t b);

  PowerSgdOptions opts_;
  ncclComm_t comm_;
  int world_size_;
  cudaStream_t stream_;
  std::vector<PowerSgdBucketPlan> plans_;
  std::vector<BucketState> state_;
  DeviceBuffer<float> copy_, u_, mtp_scratch_;
  int64_t iter_ = 0;
};

}  // namespace vitddp
