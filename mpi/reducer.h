// The gradient reducer: the whole story of a gradient from "ready" to "averaged".
#pragma once
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <chrono>
#include <vector>

#include "mpi/buckets.h"

namespace vitddp {

/// Per-step timings of every bucket's all-reduce, in milliseconds relative to the step's start
/// (GPU: the step-start CUDA event on the compute stream; CPU: the host clock at step start).
struct BucketTimes {
  std::vector<double> start_ms, end_ms;
};

/// Data-parallel gradient averaging over NCCL, overlapped with backward (PyTorch DDP semantics:
/// c10d::Reducer with gradient_as_bucket_view=True and a static graph).
///
/// Gradients live in one flat fp32 device buffer; each bucket is a contiguous slice of it. The
/// backward pass calls mark_ready() for each finished group of parameters right after enqueuing
/// its kernels on the compute stream. When a bucket becomes complete (and all earlier buckets are
/// launched), the reducer records an event on the compute stream, makes the comm stream wait for
/// it and enqueues ncclAllReduce(ncclAvg) in place on the comm stream, between two timing events.
/// finalize() launches anything left (all buckets with overlap off) and makes the compute stream
/// wait for the comm stream, so the optimizer reads averaged gradients.
class NcclReducer {
 public:
  NcclReducer(const ParamLayout& layout, std::vector<Bucket> buckets, float* d_grads, ncclComm_t comm,
              cudaStream_t compute, bool overlap);
  ~NcclReducer();
  NcclReducer(const NcclReducer&) = delete;
  NcclReducer& operator=(const NcclReducer&) = delete;

  void prepare_for_backward();
  void mark_ready(const std::vector<size_t>& params);
  void finalize();
  /// Reads the bucket events of the finished step relative to `step_start` (call after the step's
  /// work has completed).
  BucketTimes times(cudaEvent_t step_start) const;
  /// The event recorded on the comm stream after the last all-reduce of the step.
  cudaEvent_t comm_done() const { return comm_done_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  cudaStream_t comm_stream() const { return comm_stream_; }

 private:
  void launch(size_t bucket);

  std::vector<Bucket> buckets_;
  BucketTracker tracker_;
  float* d_grads_;
  ncclComm_t comm_;
  cudaStream_t compute_;
  cudaStream_t comm_stream_ = nullptr;
  bool overlap_;
  std::vector<cudaEvent_t> ready_, start_, end_;
  cudaEvent_t comm_done_ = nullptr;
};

/// The CPU backend's reducer: same buckets and launch order, gradients in host memory, each
/// complete bucket scaled by 1/world_size and summed with MPI_Iallreduce(MPI_SUM) in place (DDP
/// divides before the sum); finalize() waits for all requests.
class MpiReducer {
 public:
  MpiReducer(const ParamLayout& layout, std::vector<Bucket> buckets, float* grads, int world_size, bool overlap);
  void prepare_for_backward(std::chrono::steady_clock::time_point step_start);
  void mark_ready(const std::vector<size_t>& params);
  void finalize();
  BucketTimes times() const { return times_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }

 private:
  void launch(size_t bucket);
  double now_ms() const;

  std::vector<Bucket> buckets_;
  BucketTracker tracker_;
  float* grads_;
  int world_size_;
  bool overlap_;
  std::vector<MPI_Request> requests_;
  std::chrono::steady_clock::time_point step_start_;
  BucketTimes times_;
};

}  // namespace vitddp
