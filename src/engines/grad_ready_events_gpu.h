// CUDA timing events of the gradient-ready groups of a backward (--record-grad-ready).
#pragma once
#include <cuda_runtime.h>

#include <vector>

#include "model/grad_ready.h"

namespace vitddp {

/// One timing event per gradient-ready group (grad_ready_groups(layout)), recorded on the
/// compute stream when the backward reports the group: GradReadyFn runs right after the group's
/// last kernel is enqueued, so the event completes when that kernel has (the GPU counterpart of
/// the CPU backend's host-clock reading). Recorded with record_timing_event (cuda/model/step_graph.h),
/// as BucketTimeline's events: during a CUDA graph capture each becomes an event-record node,
/// recorded again on every replay, and times_ms() reads the latest replay as after an eager step.
/// Cost: 6 x layers + 4 events on the compute stream per step (vit_l_32: 148).
class GradReadyEvents {
 public:
  /// Creates the events. Throws std::runtime_error on CUDA failure.
  explicit GradReadyEvents(const ParamLayout& layout);
  ~GradReadyEvents();
  GradReadyEvents(const GradReadyEvents&) = delete;
  GradReadyEvents& operator=(const GradReadyEvents&) = delete;

  /// Call before the backward whose groups are timed.
  void reset() { order_.reset(); }
  /// Records group `params`'s event on `stream`. Throws std::logic_error when `params` is not
  /// the next group (GradReadyOrder), std::runtime_error on CUDA failure.
  void mark(const std::vector<size_t>& params, cudaStream_t stream);
  /// Milliseconds from `ref` (recorded on the same stream before the backward) to each group's
  /// event, in group order; empty unless every group was marked since the last reset(). Needs the
  /// events completed (after the step's end event). Throws std::runtime_error on CUDA failure.
  std::vector<double> times_ms(cudaEvent_t ref) const;
  /// Groups per backward.
  size_t groups() const { return events_.size(); }

 private:
  GradReadyOrder order_;
  std::vector<cudaEvent_t> events_;
};

}  // namespace vitddp
