// CUDA events around one bucket's communication work in one step, for the per-bucket timings.
#pragma once
#include <cuda_runtime.h>

#include <vector>

namespace vitddp {

/// A pool of timing events recorded in order on the bucket's comm stream while its hook is
/// enqueued (GpuReducer's GradBucket::mark). start = the first event of the step, end = the
/// last. Reading needs the events completed.
class BucketTimeline {
 public:
  /// Creates `capacity` timing events. Throws std::runtime_error on CUDA failure.
  explicit BucketTimeline(int capacity = 8);
  ~BucketTimeline();
  BucketTimeline(const BucketTimeline&) = delete;
  BucketTimeline& operator=(const BucketTimeline&) = delete;

  /// Forgets the last step's marks (call before enqueuing the bucket's work).
  void reset() { used_ = 0; }
  /// Records the next event on `stream`; returns its index. Throws std::logic_error when the
  /// pool is exhausted.
  int mark(cudaStream_t stream);

  bool empty() const { return used_ == 0; }
  /// Milliseconds from event `a` to event `b` of this step.
  double elapsed_ms(int a, int b) const;
  /// Milliseconds from `ref` to the first / last event (ref must precede them and be completed).
  double start_ms(cudaEvent_t ref) const;
  double end_ms(cudaEvent_t ref) const;

 private:
  std::vector<cudaEvent_t> events_;
  int used_ = 0;
};

}  // namespace vitddp
