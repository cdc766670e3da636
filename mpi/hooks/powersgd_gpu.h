// PowerSGD on the GPU: PyTorch's powerSGD_hook in fp32 kernels on the reducer's comm stream, its
// all-reduces through the bucket's transport (GradBucket::all_reduce), behind the powersgd hook.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "cuda/kernels/compression.h"
#include "cuda/model/device_buffer.h"
#include "mpi/hooks/comm_hook.h"
#include "mpi/hooks/powersgd_host.h"
#include "mpi/reducer/reducer_options.h"

namespace vitddp {

/// The PowerSGD comm hook for every bucket of a model, on one GPU, with its device state (error
/// per bucket, P and Q memories) and the iteration counter. Same algorithm, order of all-reduce
/// calls and initial Qs as PowerSgdHost (mpi/hooks/powersgd_host.h), in fp32 kernels (cuda/kernels/compression.h).
///
/// All kernels go to `stream` (the reducer's first comm stream, where the bucket's all-reduces
/// run too: PowerSGD is refused with transports of several streams); state buffers are allocated
/// in the constructor (error: one float per bucket element when error feedback is on). Scratch
/// buffers are shared by all buckets, which is safe because one stream runs them in order.
class PowerSgdGpu final : public PowerSgdState {
 public:
  /// Throws std::invalid_argument for bad options, std::runtime_error on CUDA failure.
  PowerSgdGpu(std::vector<HookBucket> buckets, const PowerSgdOptions& options, int world_size, cudaStream_t stream);

  /// True when the next run_bucket compresses (iteration >= start_iter); before that the hook
  /// runs the plain all-reduce.
  bool compressing() const override { return iter_ >= opts_.start_iter; }
  /// Enqueues the compressed hook for `bucket` (its buffer: plan(index).numel device floats,
  /// reduced in place; its all-reduces SUM in fp32 through the bucket's transport), with its
  /// timings. Requires compressing().
  void run_bucket(GradBucket& bucket) override;
  /// Increases the iteration counter (once per step, after the last bucket).
  void end_step() override { ++iter_; }

  int64_t iteration() const { return iter_; }
  const PowerSgdBucketPlan& plan(size_t b) const { return plans_.at(b); }
  /// Device bytes held (state and scratch).
  size_t device_bytes() const override;
  /// Device bytes a PowerSgdGpu built from `buckets` and `options` holds (device_bytes() of the
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
  int world_size_;
  cudaStream_t stream_;
  std::vector<PowerSgdBucketPlan> plans_;
  std::vector<BucketState> state_;
  DeviceBuffer<float> copy_, u_, mtp_scratch_;
  int64_t iter_ = 0;
};

}  // namespace vitddp
