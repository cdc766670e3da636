// CUDA graphs for the training step: capture a sequence of stream work once, replay it.
#pragma once
#include <cuda_runtime.h>

#include <functional>

namespace vitddp {

/// Records timing event `e` on `stream`. Outside stream capture this is cudaEventRecord; while
/// `stream` is being captured it is cudaEventRecordWithFlags(cudaEventRecordExternal), which
/// makes the record a node of the graph, so every replay records the event and
/// cudaEventElapsedTime works on it as after an eager step (a plain cudaEventRecord during
/// capture only expresses a dependency and never records anything). Throws std::runtime_error on
/// CUDA errors.
void record_timing_event(cudaEvent_t e, cudaStream_t stream);

/// Makes `stream` wait for event `e`, which is recorded outside any graph (e.g. by eager work on
/// another stream). Outside stream capture this is cudaStreamWaitEvent; while `stream` is being
/// captured it is cudaStreamWaitEvent(cudaEventWaitExternal) (CUDA 11.1+), which makes the wait an
/// event-wait node of the graph: every replay waits for the event's record made before it (a plain
/// wait during capture would need `e` to be recorded inside the capture). The caller must not
/// record `e` again while a replay that waits on it may still run, so the replay sees the one
/// record whichever moment the node resolves it at. Throws std::runtime_error on CUDA errors.
void wait_external_event(cudaStream_t stream, cudaEvent_t e);

/// One captured CUDA graph (cudaStreamBeginCapture .. cudaStreamEndCapture on one origin stream,
/// joined by the streams it forks, e.g. a communication stream with NCCL calls) and its
/// executable instance. Kernel arguments, pointers and the host-side decisions made while
/// enqueuing are frozen at capture: a graph may be replayed only while they would be the same.
/// Capture mode is cudaStreamCaptureModeThreadLocal, so host threads that do not take part (data
/// workers, the watchdog) are unaffected. Not copyable.
class StepGraph {
 public:
  StepGraph() = default;
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;
  StepGraph(StepGraph&& o) noexcept;
  StepGraph& operator=(StepGraph&& o) noexcept;

  /// Captures what `enqueue` puts on `stream` (and on the streams that wait on it) and
  /// instantiates it; nothing runs yet. Throws std::runtime_error (the CUDA error string) when
  /// capture or instantiation fails, e.g. for an operation that is not capturable; the stream is
  /// then out of capture mode again.
  void capture(cudaStream_t stream, const std::function<void()>& enqueue);
  /// Launches the captured work on `stream`. Requires capture().
  void launch(cudaStream_t stream) const;
  bool captured() const { return exec_ != nullptr; }
  /// Nodes in the captured graph (kernels, copies, memsets, event records, NCCL's kernels).
  size_t num_nodes() const { return nodes_; }

 private:
  void reset();
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  size_t nodes_ = 0;
};

}  // namespace vitddp
