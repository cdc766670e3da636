// The CPU backend's gradient reducer (MPI all-reduce on host memory): the whole story of a
// gradient from "ready" to "averaged". The GPU backend's is mpi/reducer_gpu.h. No CUDA or NCCL header.
#pragma once
#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "mpi/bucket_times.h"
#include "mpi/buckets.h"
#include "mpi/comm_hooks.h"
#include "mpi/powersgd.h"

namespace vitddp {

/// The CPU backend's reducer: same buckets, launch order and hooks, gradients in host memory.
///  - none (and PowerSGD before its start step): each complete bucket is divided by world_size
///    and summed with MPI_Iallreduce(MPI_SUM) in place (DDP divides before the sum);
///  - fp16/bf16: cast (divided) into the bucket's 16-bit buffer, MPI_Iallreduce with a
///    user-defined op that adds pairs in fp32 and rounds back to 16 bits (what NCCL does per
///    reduction step), cast back in finalize();
///  - powersgd: PowerSgdHost with blocking MPI_Allreduce calls, run when the bucket launches.
/// finalize() waits for all requests in bucket order, copies the bucket buffer back
/// (grad_as_bucket_view=false) and counts the step for PowerSGD.
class MpiReducer {
 public:
  /// `grads`: layout.total host floats. Throws std::runtime_error on MPI failure,
  /// std::invalid_argument for bad PowerSGD options or a bucket of more than INT_MAX elements.
  MpiReducer(const ParamLayout& layout, std::vector<Bucket> buckets, float* grads, int world_size,
             const ReducerOptions& options = ReducerOptions());
  void prepare_for_backward(std::chrono::steady_clock::time_point step_start);
  void mark_ready(const std::vector<size_t>& params);
  void finalize();
  BucketTimes times() const { return times_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  const ReducerOptions& options() const { return opts_; }
  /// The PowerSGD hook (null unless compression == PowerSgd), for its iteration counter and state.
  const PowerSgdHost* powersgd() const { return powersgd_.get(); }

 private:
  struct Pending {
    size_t bucket;
    MPI_Request request;
    double issued_ms;
  };
  void launch(size_t bucket);
  double now_ms() const;
  float* bucket_data(size_t b);

  std::vector<Bucket> buckets_;
  BucketTracker tracker_;
  float* grads_;
  int world_size_;
  ReducerOptions opts_;
  std::vector<float> bucket_buf_;               ///< grad_as_bucket_view=false
  std::vector<std::vector<uint16_t>> half_;     ///< fp16/bf16: per bucket (requests overlap)
  std::unique_ptr<Mpi16BitSumOps> half_ops_;
  std::unique_ptr<PowerSgdHost> powersgd_;
  std::vector<Pending> pending_;
  std::chrono::steady_clock::time_point step_start_;
  BucketTimes times_;
};

}  // namespace vitddp
