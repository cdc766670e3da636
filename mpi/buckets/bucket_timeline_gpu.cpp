#include "mpi/buckets/bucket_timeline_gpu.h"

#include <stdexcept>
#include <string>

#include "cuda/check/check_cuda.h"
#include "cuda/model/step_graph.h"

namespace vitddp {

namespace {
double elapsed(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  return ms;
}
}  // namespace

BucketTimeline::BucketTimeline(int capacity) : events_(capacity, nullptr) {
  for (auto& e : events_) CUDA_CHECK(cudaEventCreate(&e));
}

BucketTimeline::~BucketTimeline() {
  for (auto e : events_)
    if (e) cudaEventDestroy(e);
}

int BucketTimeline::mark(cudaStream_t stream) {
  if (used_ >= static_cast<int>(events_.size()))
    throw std::logic_error("BucketTimeline: more than " + std::to_string(events_.size()) + " events in one step");
  record_timing_event(events_[used_], stream);  // an event record node when captured
  return used_++;
}

double BucketTimeline::elapsed_ms(int a, int b) const { return elapsed(events_.at(a), events_.at(b)); }

double BucketTimeline::start_ms(cudaEvent_t ref) const {
  if (used_ == 0) return 0;
  return elapsed(ref, events_[0]);
}

double BucketTimeline::end_ms(cudaEvent_t ref) const {
  if (used_ == 0) return 0;
  return elapsed(ref, events_[used_ - 1]);
}

}  // namespace vitddp
