#include "src/engines/grad_ready_events_gpu.h"

#include "cuda/check/check_cuda.h"
#include "cuda/model/step_graph.h"

namespace vitddp {

GradReadyEvents::GradReadyEvents(const ParamLayout& layout) : order_(layout), events_(order_.size(), nullptr) {
  try {
    for (auto& e : events_) CUDA_CHECK(cudaEventCreate(&e));
  } catch (...) {
    for (auto e : events_)
      if (e) cudaEventDestroy(e);
    throw;
  }
}

GradReadyEvents::~GradReadyEvents() {
  for (auto e : events_)
    if (e) cudaEventDestroy(e);
}

void GradReadyEvents::mark(const std::vector<size_t>& params, cudaStream_t stream) {
  record_timing_event(events_[order_.next(params)], stream);  // an event-record node when captured
}

std::vector<double> GradReadyEvents::times_ms(cudaEvent_t ref) const {
  std::vector<double> t;
  if (order_.reported() != events_.size()) return t;
  t.reserve(events_.size());
  for (cudaEvent_t e : events_) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, ref, e));
    t.push_back(ms);
  }
  return t;
}

}  // namespace vitddp
