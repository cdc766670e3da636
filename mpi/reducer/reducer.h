// The gradient reducer's core (CUDA-free): the bucket plan, ready tracking, launch order and the
// step's end, shared by both backends (c10d::Reducer with a static graph). Where a bucket's
// work runs is the backend's (ReducerBackend: GpuReducer's streams and events, CpuReducer's MPI
// requests); what the work is, the comm hook's (mpi/hooks/comm_hook.h).
#pragma once
#include <memory>
#include <vector>

#include "model/param_layout.h"
#include "mpi/buckets/buckets.h"
#include "mpi/hooks/comm_hook.h"

namespace vitddp {

/// The backend half of a reducer: makes a complete bucket available to communication and
/// completes the step.
class ReducerBackend {
 public:
  virtual ~ReducerBackend() = default;
  /// Bucket `b` is complete: orders its communication after the gradients (GPU: the bucket
  /// copy of grad_as_bucket_view=false and the ready event on the compute stream, the comm
  /// stream's wait; CPU: the copy) and returns it as the hook sees it, its timings reset.
  virtual GradBucket& start_bucket(size_t b) = 0;
  /// Every bucket is launched: completes them (GPU: comm streams joined, the compute stream
  /// waits, copies back; CPU: MPI requests waited in bucket order, continuations run, copies back).
  virtual void finish_buckets() = 0;
};

/// Buckets launch strictly in bucket order (c10d::Reducer): mark_ready() launches each bucket
/// that became complete once the earlier ones are (with overlap), finalize() launches the rest
/// (all of them with --no-overlap), lets the backend complete the step, then calls the hook's
/// end_step(). Each launch is an NVTX range "all-reduce bucket k" ("reduce-scatter bucket k" with
/// --shard-optimizer: CommHook::collective()).
class Reducer {
 public:
  /// `hook` and `backend` must outlive the reducer.
  Reducer(const ParamLayout& layout, std::vector<Bucket> buckets, bool overlap);
  void attach(CommHook& hook, ReducerBackend& backend) {
    hook_ = &hook;
    backend_ = &backend;
  }
  /// Forgets the readiness of the last backward.
  void prepare_for_backward() { tracker_.reset(); }
  /// Parameters whose gradients are complete (see BucketTracker::mark_ready).
  void mark_ready(const std::vector<size_t>& params);
  void finalize();
  const std::vector<Bucket>& buckets() const { return buckets_; }

 private:
  void launch(size_t b);

  std::vector<Bucket> buckets_;
  BucketTracker tracker_;
  bool overlap_;
  CommHook* hook_ = nullptr;
  ReducerBackend* backend_ = nullptr;
};

/// Elements of the largest bucket (0 when there is none).
size_t max_bucket_numel(const std::vector<Bucket>& buckets);

}  // namespace vitddp
