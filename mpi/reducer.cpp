#include "mpi/reducer.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <stdexcept>
#include <string>

#include "src/nvtx.h"
#include "mpi/world.h"

namespace vitddp {

namespace {

bool is_16bit(Compression c) { return c == Compression::Fp16 || c == Compression::Bf16; }

}  // namespace

// ---------------------------------------------------------------- MPI (CPU backend)

MpiReducer::MpiReducer(const ParamLayout& layout, std::vector<Bucket> buckets, float* grads, int world_size,
                       const ReducerOptions& options)
    : buckets_(std::move(buckets)), tracker_(layout, buckets_), grads_(grads), world_size_(world_size),
      opts_(options) {
  for (const auto& b : buckets_)
    if (b.numel > static_cast<size_t>(INT_MAX))
      throw std::invalid_argument("MpiReducer: bucket " + std::to_string(b.index) + " has more than INT_MAX elements");
  if (!opts_.grad_as_bucket_view) bucket_buf_.assign(layout.total, 0.0f);
  if (is_16bit(opts_.compression)) {
    half_.resize(buckets_.size());
    for (size_t b = 0; b < buckets_.size(); ++b) half_[b].resize(buckets_[b].numel);
    half_ops_ = std::make_unique<Mpi16BitSumOps>();
  }
  if (opts_.compression == Compression::PowerSgd)
    powersgd_ = std::make_unique<PowerSgdHost>(hook_buckets(layout, buckets_), opts_.powersgd, world_size_);
  times_.resize(buckets_.size());
}

double MpiReducer::now_ms() const {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - step_start_).count();
}

float* MpiReducer::bucket_data(size_t b) {
  return (opts_.grad_as_bucket_view ? grads_ : bucket_buf_.data()) + buckets_[b].offset;
}

void MpiReducer::prepare_for_backward(std::chrono::steady_clock::time_point step_start) {
  tracker_.reset();
  step_start_ = step_start;
  pending_.clear();
  times_.resize(buckets_.size());
}

void MpiReducer::mark_ready(const std::vector<size_t>& params) {
  for (size_t b : tracker_.mark_ready(params))
    if (opts_.overlap) launch(b);
}

void MpiReducer::launch(size_t b) {
  const Bucket& bk = buckets_[b];
  NvtxRange range("all-reduce bucket " + std::to_string(b), NvtxColor::Orange);
  float* p = bucket_data(b);
  if (!opts_.grad_as_bucket_view) {
    const double t0 = now_ms();
    std::memcpy(p, grads_ + bk.offset, bk.bytes());
    times_.copy_ms[b] += now_ms() - t0;
  }
  times_.start_ms[b] = now_ms();
  const int n = static_cast<int>(bk.numel);
  const Compression c = opts_.compression;
  if (is_16bit(c)) {
    cast_to_16bit_host(c, p, bk.numel, world_size_, half_[b].data());
    pending_.push_back(Pending{b, MPI_REQUEST_NULL, now_ms()});
    times_.compress_ms[b] += pending_.back().issued_ms - times_.start_ms[b];
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, half_[b].data(), n, MPI_UINT16_T, half_ops_->op(c), MPI_COMM_WORLD,
                             &pending_.back().request));
    times_.bytes_sent[b] = 2ull * bk.numel;
    times_.compressed[b] = 1;
  } else if (c == Compression::PowerSgd && powersgd_->compressing()) {
    const BucketCommReport r = powersgd_->run_bucket(b, p, [](float* x, size_t count) {
      MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, x, static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
    });
    times_.bytes_sent[b] = r.bytes_sent;
    times_.compressed[b] = r.compressed ? 1 : 0;
    times_.compress_ms[b] = r.compress_ms;
    times_.allreduce_ms[b] = r.allreduce_ms;
    times_.end_ms[b] = now_ms();
  } else {  // none, and PowerSGD before its start step: divide first, then sum (DDP's _allreduce_fut)
    const float ws = static_cast<float>(world_size_);
    for (size_t i = 0; i < bk.numel; ++i) p[i] /= ws;
    pending_.push_back(Pending{b, MPI_REQUEST_NULL, now_ms()});
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, p, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &pending_.back().request));
    times_.bytes_sent[b] = 4ull * bk.numel;
  }
}

void MpiReducer::finalize() {
  // Same rule as NcclReducer::finalize: with overlap every complete bucket is already launched (the rest start here); with
  // --no-overlap the tracker saw them complete but none was launched: all of them start here.
  const std::vector<size_t> remaining = tracker_.take_remaining();
  if (opts_.overlap) {
    for (size_t b : remaining) launch(b);
  } else {
    for (size_t b = 0; b < buckets_.size(); ++b) launch(b);
  }
  // Requests complete in launch order = bucket order; wait one by one to time each.
  for (Pending& pd : pending_) {
    const size_t b = pd.bucket;
    MPI_CHECK(MPI_Wait(&pd.request, MPI_STATUS_IGNORE));
    const double done = now_ms();
    times_.allreduce_ms[b] += done - pd.issued_ms;
    if (is_16bit(opts_.compression)) {
      cast_from_16bit_host(opts_.compression, half_[b].data(), buckets_[b].numel, bucket_data(b));
      times_.compress_ms[b] += now_ms() - done;
    }
    times_.end_ms[b] = now_ms();
  }
  pending_.clear();
  if (!opts_.grad_as_bucket_view) {
    for (size_t b = 0; b < buckets_.size(); ++b) {
      const double t0 = now_ms();
      std::memcpy(grads_ + buckets_[b].offset, bucket_data(b), buckets_[b].bytes());
      times_.copy_ms[b] += now_ms() - t0;
    }
  }
  if (powersgd_) powersgd_->end_step();  // PyTorch: maybe_increase_iter at the last bucket
}

}  // namespace vitddp
