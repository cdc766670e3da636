#include "mpi/reducer.h"

#include <string>

#include "cuda/check.h"
#include "cuda/nvtx.h"
#include "mpi/world.h"

namespace vitddp {

// ---------------------------------------------------------------- NCCL (GPU backend)

NcclReducer::NcclReducer(const ParamLayout& layout, std::vector<Bucket> buckets, float* d_grads,
                         ncclComm_t comm, cudaStream_t compute, bool overlap)
    : buckets_(std::move(buckets)), tracker_(layout, buckets_), d_grads_(d_grads), comm_(comm),
      compute_(compute), overlap_(overlap) {
  // The comm stream gets the highest priority so NCCL kernels are scheduled as soon as backward
  // leaves room for them.
  int lo = 0, hi = 0;
  CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
  CUDA_CHECK(cudaStreamCreateWithPriority(&comm_stream_, cudaStreamNonBlocking, hi));
  auto make = [](std::vector<cudaEvent_t>& v, size_t n, unsigned flags) {
    v.resize(n);
    for (auto& e : v) CUDA_CHECK(cudaEventCreateWithFlags(&e, flags));
  };
  make(ready_, buckets_.size(), cudaEventDisableTiming);
  make(start_, buckets_.size(), cudaEventDefault);
  make(end_, buckets_.size(), cudaEventDefault);
  CUDA_CHECK(cudaEventCreateWithFlags(&comm_done_, cudaEventDisableTiming));
}

NcclReducer::~NcclReducer() {
  for (auto* v : {&ready_, &start_, &end_})
    for (auto e : *v) cudaEventDestroy(e);
  if (comm_done_) cudaEventDestroy(comm_done_);
  if (comm_stream_) cudaStreamDestroy(comm_stream_);
}

void NcclReducer::prepare_for_backward() { tracker_.reset(); }

void NcclReducer::mark_ready(const std::vector<size_t>& params) {
  for (size_t b : tracker_.mark_ready(params)) {
    if (overlap_) launch(b);
  }
}

void NcclReducer::launch(size_t b) {
  const Bucket& bk = buckets_[b];
  NvtxRange range("all-reduce bucket " + std::to_string(b), NvtxColor::Orange);
  CUDA_CHECK(cudaEventRecord(ready_[b], compute_));
  CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, ready_[b], 0));
  CUDA_CHECK(cudaEventRecord(start_[b], comm_stream_));
  float* p = d_grads_ + bk.offset;
  NCCL_CHECK(ncclAllReduce(p, p, bk.numel, ncclFloat32, ncclAvg, comm_, comm_stream_));
  CUDA_CHECK(cudaEventRecord(end_[b], comm_stream_));
}

void NcclReducer::finalize() {
  // With overlap every bucket is already launched; with --no-overlap all of them start here.
  for (size_t b : tracker_.take_remaining()) launch(b);
  CUDA_CHECK(cudaEventRecord(comm_done_, comm_stream_));
  CUDA_CHECK(cudaStreamWaitEvent(compute_, comm_done_, 0));
}

BucketTimes NcclReducer::times(cudaEvent_t step_start) const {
  BucketTimes t;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    float s = 0, e = 0;
    CUDA_CHECK(cudaEventElapsedTime(&s, step_start, start_[b]));
    CUDA_CHECK(cudaEventElapsedTime(&e, step_start, end_[b]));
    t.start_ms.push_back(s);
    t.end_ms.push_back(e);
  }
  return t;
}

// ---------------------------------------------------------------- MPI (CPU backend)

MpiReducer::MpiReducer(const ParamLayout& layout, std::vector<Bucket> buckets, float* grads, int world_size,
                       bool overlap)
    : buckets_(std::move(buckets)), tracker_(layout, buckets_), grads_(grads), world_size_(world_size),
      overlap_(overlap) {}

double MpiReducer::now_ms() const {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - step_start_).count();
}

void MpiReducer::prepare_for_backward(std::chrono::steady_clock::time_point step_start) {
  tracker_.reset();
  step_start_ = step_start;
  requests_.clear();
  times_.start_ms.assign(buckets_.size(), 0.0);
  times_.end_ms.assign(buckets_.size(), 0.0);
}

void MpiReducer::mark_ready(const std::vector<size_t>& params) {
  for (size_t b : tracker_.mark_ready(params))
    if (overlap_) launch(b);
}

void MpiReducer::launch(size_t b) {
  const Bucket& bk = buckets_[b];
  NvtxRange range("all-reduce bucket " + std::to_string(b), NvtxColor::Orange);
  times_.start_ms[b] = now_ms();
  float* p = grads_ + bk.offset;
  const float scale = 1.0f / static_cast<float>(world_size_);
  for (size_t i = 0; i < bk.numel; ++i) p[i] *= scale;  // divide before the sum, as DDP does
  requests_.emplace_back();
  MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, p, static_cast<int>(bk.numel), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                           &requests_.back()));
}

void MpiReducer::finalize() {
  for (size_t b : tracker_.take_remaining()) launch(b);
  // Requests complete in launch order = bucket order; wait one by one to time each.
  for (size_t i = 0; i < requests_.size(); ++i) {
    MPI_CHECK(MPI_Wait(&requests_[i], MPI_STATUS_IGNORE));
    times_.end_ms[i] = now_ms();
  }
  requests_.clear();
}

}  // namespace vitddp
