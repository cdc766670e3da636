#include "cuda/model/step_graph.h"

#include <stdexcept>
#include <string>
#include <utility>

#include "cuda/check/check_cuda.h"

namespace vitddp {

void record_timing_event(cudaEvent_t e, cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  if (status == cudaStreamCaptureStatusActive) {
    CUDA_CHECK(cudaEventRecordWithFlags(e, stream, cudaEventRecordExternal));
  } else {
    CUDA_CHECK(cudaEventRecord(e, stream));
  }
}

void wait_external_event(cudaStream_t stream, cudaEvent_t e) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  CUDA_CHECK(cudaStreamWaitEvent(stream, e, status == cudaStreamCaptureStatusActive ? cudaEventWaitExternal : 0));
}

StepGraph::~StepGraph() { reset(); }

StepGraph::StepGraph(StepGraph&& o) noexcept
    : graph_(std::exchange(o.graph_, nullptr)), exec_(std::exchange(o.exec_, nullptr)), nodes_(o.nodes_) {}

StepGraph& StepGraph::operator=(StepGraph&& o) noexcept {
  if (this != &o) {
    reset();
    graph_ = std::exchange(o.graph_, nullptr);
    exec_ = std::exchange(o.exec_, nullptr);
    nodes_ = o.nodes_;
  }
  return *this;
}

void StepGraph::reset() {
  if (exec_) cudaGraphExecDestroy(exec_);
  if (graph_) cudaGraphDestroy(graph_);
  exec_ = nullptr;
  graph_ = nullptr;
  nodes_ = 0;
}

void StepGraph::capture(cudaStream_t stream, const std::function<void()>& enqueue) {
  reset();
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    enqueue();
  } catch (...) {
    cudaGraph_t partial = nullptr;
    cudaStreamEndCapture(stream, &partial);  // leave capture mode whatever happened
    if (partial) cudaGraphDestroy(partial);
    cudaGetLastError();
    throw;
  }
  const cudaError_t end = cudaStreamEndCapture(stream, &graph_);
  if (end != cudaSuccess) {
    graph_ = nullptr;
    throw std::runtime_error(std::string("CUDA graph capture of the training step failed: ") +
                             cudaGetErrorString(end));
  }
  CUDA_CHECK(cudaGraphGetNodes(graph_, nullptr, &nodes_));
  const cudaError_t inst = cudaGraphInstantiate(&exec_, graph_, 0);
  if (inst != cudaSuccess) {
    exec_ = nullptr;
    reset();
    throw std::runtime_error(std::string("CUDA graph instantiation of the training step failed: ") +
                             cudaGetErrorString(inst));
  }
}

void StepGraph::launch(cudaStream_t stream) const {
  if (!exec_) throw std::logic_error("StepGraph::launch before capture");
  CUDA_CHECK(cudaGraphLaunch(exec_, stream));
}

}  // namespace vitddp
