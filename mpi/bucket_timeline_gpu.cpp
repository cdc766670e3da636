#include "mpi/bucket_timeline_gpu.h"

#include <stdexcept>

#include "cuda/check_cuda.h"
#include "cuda/step_graph.h"

namespace vitddp {

namespace {
double elapsed_ms(cudaEvent_t a, cudaEvent_t b) {
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

void BucketTimeline::reset() {
  used_ = 0;
  compress_.clear();
  allreduce_.clear();
  bytes_ = 0;
  compressed_ = false;
}

int BucketTimeline::mark(cudaStream_t stream) {
  if (used_ >= static_cast<int>(events_.size()))
    throw std::logic_error("BucketTimeline: more than " + std::to_string(events_.size()) + " events in one step");
  record_timing_event(events_[used_], stream);  // an event record node when captured
  return used_++;
}

double BucketTimeline::start_ms(cudaEvent_t ref) const {
  if (used_ == 0) return 0;
  return elapsed_ms(ref, events_[0]);
}

double BucketTimeline::end_ms(cudaEvent_t ref) const {
  if (used_ == 0) return 0;
  return elapsed_ms(ref, events_[used_ - 1]);
}

BucketCommReport BucketTimeline::report() const {
  BucketCommReport r;
  r.bytes_sent = bytes_;
  r.compressed = compressed_;
  for (const auto& [a, b] : compress_) r.compress_ms += elapsed_ms(events_[a], events_[b]);
  for (const auto& [a, b] : allreduce_) r.allreduce_ms += elapsed_ms(events_[a], events_[b]);
  return r;
}

}  // namespace vitddp
