#include "mpi/reducer_gpu.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <stdexcept>
#include <string>

#include "cuda/ce_reduce.h"
#include "cuda/check_cuda.h"
#include "mpi/nccl_check_gpu.h"
#include "cuda/compression.h"
#include "src/nvtx.h"
#include "cuda/step_graph.h"
#include "mpi/world.h"

namespace vitddp {

namespace {

size_t max_bucket_numel(const std::vector<Bucket>& buckets) {
  size_t n = 0;
  for (const auto& b : buckets) n = std::max(n, b.numel);
  return n;
}

bool is_16bit(Compression c) { return c == Compression::Fp16 || c == Compression::Bf16; }

// The copy-engine all-reduce's largest payload per bucket: the fp32 bucket.
std::vector<size_t> ce_bucket_bytes(const std::vector<Bucket>& buckets) {
  std::vector<size_t> v;
  for (const auto& b : buckets) v.push_back(b.bytes());
  return v;
}

}  // namespace

// ---------------------------------------------------------------- NCCL (GPU backend)

NcclReducer::NcclReducer(const ParamLayout& layout, std::vector<Bucket> buckets, float* d_grads,
                         ncclComm_t comm, cudaStream_t compute, const ReducerOptions& options)
    : buckets_(std::move(buckets)), tracker_(layout, buckets_), d_grads_(d_grads), comm_(comm),
      compute_(compute), opts_(options) {
  if (opts_.comm_streams < 1 || opts_.comm_streams > 4)
    throw std::invalid_argument("NcclReducer: comm_streams " + std::to_string(opts_.comm_streams) + " outside [1, 4]");
  if (opts_.compression == Compression::PowerSgd && opts_.allreduce != AllReduceImpl::Nccl)
    throw std::invalid_argument("NcclReducer: PowerSGD runs its all-reduces through NCCL on the first comm stream; "
                                "it cannot be combined with the copy-engine all-reduce");
  NCCL_CHECK(ncclCommCount(comm_, &world_size_));
  try {
    create(layout);
  } catch (...) {
    release();  // the destructor does not run for a constructor that throws
    throw;
  }
}

void NcclReducer::create(const ParamLayout& layout) {
  // The comm stream gets the highest priority so NCCL kernels are scheduled as soon as backward
  // leaves room for them.
  int lo = 0, hi = 0;
  CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
  const int streams = uses_copy_engine(opts_, world_size_) ? opts_.comm_streams : 1;
  for (int i = 0; i < streams; ++i) {
    cudaStream_t st = nullptr;
    CUDA_CHECK(cudaStreamCreateWithPriority(&st, cudaStreamNonBlocking, hi));
    comm_streams_.push_back(st);
    cudaEvent_t e = nullptr;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    comm_joined_.push_back(e);
    if (is_16bit(opts_.compression))
      half_.emplace_back(max_bucket_numel(buckets_), "16-bit gradient staging buffer (comm stream " + std::to_string(i) + ")");
  }
  ready_.resize(buckets_.size());
  for (auto& e : ready_) CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  for (size_t b = 0; b < buckets_.size(); ++b) timeline_.push_back(std::make_unique<BucketTimeline>(6));
  CUDA_CHECK(cudaEventCreateWithFlags(&comm_done_, cudaEventDisableTiming));
  if (!opts_.grad_as_bucket_view) {
    copy_ev_.resize(4 * buckets_.size());
    for (auto& e : copy_ev_) CUDA_CHECK(cudaEventCreate(&e));
    d_bucket_ = DeviceBuffer<float>(layout.total, "DDP bucket buffer (--grad-as-bucket-view off)");
    CUDA_CHECK(cudaMemset(d_bucket_.get(), 0, layout.total * sizeof(float)));  // padding stays 0
  }
  if (opts_.compression == Compression::PowerSgd)
    powersgd_ = std::make_unique<PowerSgdNccl>(hook_buckets(layout, buckets_), opts_.powersgd, comm_, world_size_,
                                               comm_stream());
  CUDA_CHECK(cudaDeviceSynchronize());  // memsets on the legacy stream before the comm stream runs
  if (uses_copy_engine(opts_, world_size_)) {
    std::vector<CopyEngineAllReduce::Region> regions = {{d_grads_, layout.total * sizeof(float)}};
    if (d_bucket_.get()) regions.emplace_back(d_bucket_.get(), d_bucket_.size() * sizeof(float));
    for (auto& h : half_) regions.emplace_back(h.get(), h.size() * sizeof(uint16_t));
    ce_ = std::make_unique<CopyEngineAllReduce>(MPI_COMM_WORLD, regions, ce_bucket_bytes(buckets_));
  }
}

NcclReducer::~NcclReducer() { release(); }

void NcclReducer::release() {
  // Every stream drained first, then the work's events and buffers, then the streams.
  for (auto st : comm_streams_) cudaStreamSynchronize(st);
  ce_.reset();
  powersgd_.reset();
  timeline_.clear();
  for (auto* v : {&ready_, &copy_ev_, &comm_joined_})
    for (auto e : *v) cudaEventDestroy(e);
  ready_.clear();
  copy_ev_.clear();
  comm_joined_.clear();
  if (comm_done_) cudaEventDestroy(comm_done_);
  comm_done_ = nullptr;
  for (auto st : comm_streams_) cudaStreamDestroy(st);
  comm_streams_.clear();
}

size_t NcclReducer::device_bytes() const {
  size_t half = 0;
  for (const auto& h : half_) half += h.size() * sizeof(uint16_t);
  return d_bucket_.size() * sizeof(float) + half +
         (powersgd_ ? powersgd_->device_bytes() : 0) + (ce_ ? ce_->device_bytes() : 0);
}

size_t NcclReducer::planned_device_bytes(const ParamLayout& layout, const std::vector<Bucket>& buckets,
                                         const ReducerOptions& options, int world_size) {
  size_t n = 0;
  if (!options.grad_as_bucket_view) n += layout.total * sizeof(float);
  if (is_16bit(options.compression)) n += max_bucket_numel(buckets) * sizeof(uint16_t);
  if (options.compression == Compression::PowerSgd)
    n += PowerSgdNccl::planned_device_bytes(hook_buckets(layout, buckets), options.powersgd);
  if (uses_copy_engine(options, world_size)) {
    n += CopyEngineAllReduce::planned_device_bytes(ce_bucket_bytes(buckets), world_size);
    if (is_16bit(options.compression))  // a 16-bit staging buffer per extra comm stream
      n += static_cast<size_t>(std::max(options.comm_streams - 1, 0)) * max_bucket_numel(buckets) * sizeof(uint16_t);
  }
  return n;
}

void NcclReducer::prepare_for_backward() {
  tracker_.reset();
  step_started_ = false;
}

void NcclReducer::flag_nonfinite(int* d_flag, cudaStream_t stream) const {
  if (!ce_) throw std::logic_error("NcclReducer::flag_nonfinite: only with the copy-engine all-reduce");
  ce_or_flags(ce_->nonfinite_slots(), ce_->world_size(), d_flag, stream);
}

void NcclReducer::mark_ready(const std::vector<size_t>& params) {
  for (size_t b : tracker_.mark_ready(params)) {
    if (opts_.overlap) launch(b);
  }
}

void NcclReducer::launch(size_t b) {
  const Bucket& bk = buckets_[b];
  NvtxRange range("all-reduce bucket " + std::to_string(b), NvtxColor::Orange);
  float* p = d_grads_ + bk.offset;
  if (!opts_.grad_as_bucket_view) {
    // DDP's copy of the gradients into the bucket (gradient_as_bucket_view=False), on the stream
    // that produced them.
    float* dst = d_bucket_.get() + bk.offset;
    record_timing_event(copy_ev_[4 * b], compute_);
    CUDA_CHECK(cudaMemcpyAsync(dst, p, bk.bytes(), cudaMemcpyDeviceToDevice, compute_));
    record_timing_event(copy_ev_[4 * b + 1], compute_);
    p = dst;
  }
  // The bucket's comm stream: bucket b takes stream b mod (number of streams), on every rank
  // alike (its 16-bit staging is that stream's).
  const size_t si = b % comm_streams_.size();
  cudaStream_t cs = comm_streams_[si];
  uint16_t* half = half_.empty() ? nullptr : half_[si].get();
  // On the compute stream, before the ready event: every comm stream is ordered after it, and
  // inside a capture it becomes a graph node (a comm stream joins a capture only at its wait).
  if (ce_ && !step_started_) ce_->begin_step(compute_);
  step_started_ = true;
  CUDA_CHECK(cudaEventRecord(ready_[b], compute_));
  CUDA_CHECK(cudaStreamWaitEvent(cs, ready_[b], 0));
  BucketTimeline& tl = *timeline_[b];
  tl.reset();
  const Compression c = opts_.compression;
  if (is_16bit(c)) {
    const bool bf16 = c == Compression::Bf16;
    const float ws = static_cast<float>(world_size_);
    const int e0 = tl.mark(cs);
    int e1 = -1, e2 = -1;
    if (ce_) {  // the casts fused into the copy-engine all-reduce (same bits, fewer passes)
      int marks[2] = {-1, -1}, k = 0;
      ce_->all_reduce_16bit(b, p, half, bk.numel, bf16 ? CeDtype::Bf16 : CeDtype::F16, ws, cs,
                            [&] {
                              if (k == 2) throw std::logic_error("all_reduce_16bit: more than two timing marks");
                              marks[k++] = tl.mark(cs);
                            });
      if (k != 2) throw std::logic_error("all_reduce_16bit: expected two timing marks");
      e1 = marks[0];
      e2 = marks[1];
    } else {
      cast_to_16bit(p, bk.numel, ws, bf16, half, cs);
      e1 = tl.mark(cs);
      NCCL_CHECK(ncclAllReduce(half, half, bk.numel, bf16 ? ncclBfloat16 : ncclFloat16, ncclSum, comm_, cs));
      e2 = tl.mark(cs);
      cast_from_16bit(half, bk.numel, bf16, p, cs);
    }
    const int e3 = tl.mark(cs);
    tl.compress(e0, e1);
    tl.allreduce(e1, e2, 2ull * bk.numel);
    tl.compress(e2, e3);
    tl.set_compressed(true);
  } else if (c == Compression::PowerSgd && powersgd_->compressing()) {
    powersgd_->run_bucket(b, p, tl);
  } else {  // none, and PowerSGD before its start step (vanilla all-reduce)
    const int e0 = tl.mark(cs);
    if (ce_)
      ce_->all_reduce(b, p, bk.numel, CeDtype::F32, 1.0f / static_cast<float>(world_size_), cs);
    else
      NCCL_CHECK(ncclAllReduce(p, p, bk.numel, ncclFloat32, ncclAvg, comm_, cs));
    const int e1 = tl.mark(cs);
    tl.allreduce(e0, e1, 4ull * bk.numel);
  }
}

void NcclReducer::finalize() {
  // With overlap every complete bucket is already launched (the rest start here); with
  // --no-overlap the tracker saw them complete but none was launched: all of them start here.
  const std::vector<size_t> remaining = tracker_.take_remaining();
  if (opts_.overlap) {
    for (size_t b : remaining) launch(b);
  } else {
    for (size_t b = 0; b < buckets_.size(); ++b) launch(b);
  }
  // Stream 0 joins the other comm streams that ran a bucket: every bucket is launched by now, and
  // bucket b ran on stream b mod size(), so those are the streams below the bucket count.
  const size_t ran = std::min(buckets_.size(), comm_streams_.size());
  for (size_t i = 1; i < ran; ++i) {
    CUDA_CHECK(cudaEventRecord(comm_joined_[i], comm_streams_[i]));
    CUDA_CHECK(cudaStreamWaitEvent(comm_stream(), comm_joined_[i], 0));
  }
  if (ce_) ce_->exchange_nonfinite(comm_stream());
  CUDA_CHECK(cudaEventRecord(comm_done_, comm_stream()));
  CUDA_CHECK(cudaStreamWaitEvent(compute_, comm_done_, 0));
  if (!opts_.grad_as_bucket_view) {
    // DDP's copy of the averaged bucket back into the gradients before the optimizer.
    for (size_t b = 0; b < buckets_.size(); ++b) {
      const Bucket& bk = buckets_[b];
      record_timing_event(copy_ev_[4 * b + 2], compute_);
      CUDA_CHECK(cudaMemcpyAsync(d_grads_ + bk.offset, d_bucket_.get() + bk.offset, bk.bytes(),
                                 cudaMemcpyDeviceToDevice, compute_));
      record_timing_event(copy_ev_[4 * b + 3], compute_);
    }
  }
  if (powersgd_) powersgd_->end_step();  // PyTorch: maybe_increase_iter at the last bucket
}

BucketTimes NcclReducer::times(cudaEvent_t step_start) const {
  BucketTimes t;
  t.resize(buckets_.size());
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const BucketTimeline& tl = *timeline_[b];
    if (tl.empty()) continue;
    t.start_ms[b] = tl.start_ms(step_start);
    t.end_ms[b] = tl.end_ms(step_start);
    const BucketCommReport r = tl.report();
    t.bytes_sent[b] = r.bytes_sent;
    t.compressed[b] = r.compressed ? 1 : 0;
    t.compress_ms[b] = r.compress_ms;
    t.allreduce_ms[b] = r.allreduce_ms;
    if (!opts_.grad_as_bucket_view) {
      float in = 0, back = 0;
      CUDA_CHECK(cudaEventElapsedTime(&in, copy_ev_[4 * b], copy_ev_[4 * b + 1]));
      CUDA_CHECK(cudaEventElapsedTime(&back, copy_ev_[4 * b + 2], copy_ev_[4 * b + 3]));
      t.copy_ms[b] = in + back;
    }
  }
  return t;
}

}  // namespace vitddp
