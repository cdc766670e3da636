#include "mpi/reducer/cpu_reducer.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>

#include "mpi/hooks/half_host.h"

namespace vitddp {

// ---------------------------------------------------------------- the bucket on the host

/// GradBucket on the host: casts are host loops, all-reduces MPI requests completed in
/// complete() (then() work runs after them), marks the host clock.
class CpuReducer::HostBucket final : public GradBucket {
 public:
  HostBucket(size_t index, const HookBucket& tensors, int world_size, const CpuReducer& owner, HostTransport& transport,
             bool staging)
      : GradBucket(index, tensors, world_size), owner_(owner), transport_(transport) {
    if (staging) staging_.resize(tensors.numel);
  }

  uint16_t* staging_16bit() override { return staging_.empty() ? nullptr : staging_.data(); }

  void all_reduce(void* data, size_t count, DType t, ReduceOp op) override {
    const int issued = divide_for(op, data, count, t);
    pending_.push_back(Pending{transport_.start_sum(data, count, t), issued, count * dtype_bytes(t), {}});
  }

  void reduce_scatter(void* data, size_t count, DType t, ReduceOp op) override {
    const int issued = divide_for(op, data, count, t);
    std::vector<size_t> counts;  // rank r's chunk starts at r c (shard_chunk), the sum of the counts before it
    for (int r = 0; r < world_size(); ++r) counts.push_back(shard_count(count, world_size(), r));
    pending_.push_back(Pending{transport_.start_reduce_scatter(data, counts, t), issued, count * dtype_bytes(t), {}});
  }

  bool all_reduce_16bit_fused(float*, uint16_t*, size_t, DType, float) override { return false; }

  void then(std::function<void()> fn) override {
    if (pending_.empty()) fn();
    else pending_.back().then.push_back(std::move(fn));
  }

  /// Waits for the bucket's all-reduces in the order they started, each followed by its then() work.
  void complete() {
    for (Pending& p : pending_) {
      p.work->wait();
      allreduce(p.issued, mark(), p.bytes);
      for (auto& fn : p.then) fn();
    }
    pending_.clear();
  }

  bool empty() const { return marks_.empty(); }
  double start_ms() const { return marks_.front(); }
  double end_ms() const { return marks_.back(); }
  void clear_marks() { marks_.clear(); }

 private:
  struct Pending {
    std::unique_ptr<HostWork> work;
    int issued;  ///< the mark before the request was started
    uint64_t bytes;
    std::vector<std::function<void()>> then;
  };
  /// The mark a collective's interval starts at; for Avg, after dividing `data` by the world size
  /// first (DDP's _allreduce_fut: divide, then sum).
  int divide_for(ReduceOp op, void* data, size_t count, DType t) {
    const int issued = start_mark();
    if (op != ReduceOp::Avg) return issued;
    if (t != DType::F32) throw std::invalid_argument("CpuReducer: an average of fp32 buffers only");
    auto* x = static_cast<float*>(data);
    const float ws = static_cast<float>(world_size());
    for (size_t i = 0; i < count; ++i) x[i] /= ws;
    enqueued();
    return mark();
  }
  void do_cast_to_16bit(const float* x, size_t n, float divisor, DType t, uint16_t* out) override {
    require_16bit(t, "cast_to_16bit");
    if (t == DType::F16) {
      for (size_t i = 0; i < n; ++i) out[i] = float_to_fp16(x[i] / divisor);
    } else {
      for (size_t i = 0; i < n; ++i) out[i] = float_to_bf16(x[i] / divisor);
    }
  }
  void do_cast_from_16bit(const uint16_t* h, size_t n, DType t, float* x) override { cast_from_16bit_host(t, h, n, x); }
  int record_mark() override {
    marks_.push_back(owner_.now_ms());
    return static_cast<int>(marks_.size()) - 1;
  }
  double interval_ms(int a, int b) const override { return marks_.at(b) - marks_.at(a); }

  const CpuReducer& owner_;
  HostTransport& transport_;
  std::vector<uint16_t> staging_;
  std::vector<double> marks_;  ///< ms since the step's start
  std::vector<Pending> pending_;
};

// ---------------------------------------------------------------- PowerSGD on the host

namespace {

/// PowerSgdHost behind the powersgd hook: blocking sums through the transport, host-clock times.
class HostPowerSgd final : public PowerSgdState {
 public:
  HostPowerSgd(const std::vector<HookBucket>& buckets, const PowerSgdOptions& o, int world_size, HostTransport& t)
      : host(buckets, o, world_size), transport_(t) {}
  bool compressing() const override { return host.compressing(); }
  void run_bucket(GradBucket& b) override {
    b.mark();
    const BucketCommReport r = host.run_bucket(b.index(), b.buffer(),
                                               [this](float* x, size_t n) { transport_.sum(x, n, DType::F32); });
    b.mark();
    b.add_measured(r);
  }
  void end_step() override { host.end_step(); }

  PowerSgdHost host;

 private:
  HostTransport& transport_;
};

}  // namespace

// ---------------------------------------------------------------- the reducer

namespace {

/// Per bucket, the (first element, count) runs of layout padding: the elements no tensor covers.
std::vector<std::vector<std::pair<size_t, size_t>>> padding_gaps(const std::vector<HookBucket>& buckets) {
  std::vector<std::vector<std::pair<size_t, size_t>>> gaps;
  for (const HookBucket& b : buckets) {
    std::vector<std::pair<size_t, size_t>> spans;  // the tensors, by offset
    for (const HookTensor& t : b.tensors) spans.emplace_back(t.offset, t.numel);
    std::sort(spans.begin(), spans.end());
    std::vector<std::pair<size_t, size_t>> g;
    size_t at = 0;
    for (const auto& [off, n] : spans) {
      if (off > at) g.emplace_back(at, off - at);
      at = std::max(at, off + n);
    }
    if (b.numel > at) g.emplace_back(at, b.numel - at);
    gaps.push_back(std::move(g));
  }
  return gaps;
}

}  // namespace

CpuReducer::CpuReducer(const ParamLayout& layout, std::vector<Bucket> buckets, float* grads, int world_size,
                       const ReducerOptions& options)
    : core_(layout, std::move(buckets), options.overlap), grads_(grads), world_size_(world_size), opts_(options) {
  for (const auto& b : core_.buckets())
    if (b.numel > static_cast<size_t>(INT_MAX))
      throw std::invalid_argument("CpuReducer: bucket " + std::to_string(b.index) + " has more than INT_MAX elements");
  if (!opts_.grad_as_bucket_view) bucket_buf_.assign(layout.total, 0.0f);
  hook_buckets_ = hook_buckets(layout, core_.buckets());
  transport_ = make_host_transport("mpi");
  if (opts_.shard_optimizer) {
    if (!opts_.grad_as_bucket_view)
      throw std::invalid_argument("CpuReducer: the sharded optimizer needs grad_as_bucket_view (the reduce-scatter "
                                  "writes the shard's gradients, there is no averaged bucket to copy back)");
    shard_ = std::make_unique<ShardPlan>(core_.buckets(), world_size_, transport_->rank());
    padding_ = padding_gaps(hook_buckets_);
  }
  hook_ = make_comm_hook(opts_.compression, HookArgs{hook_buckets_, opts_, world_size_, *this});
  hook_->allocate();
  for (size_t b = 0; b < hook_buckets_.size(); ++b)
    bucket_.push_back(std::make_unique<HostBucket>(b, hook_buckets_[b], world_size_, *this, *transport_,
                                                   hook_->uses_16bit_staging()));
  copy_ms_.assign(bucket_.size(), 0.0);
  gather_.resize(bucket_.size());
  core_.attach(*hook_, *this);
}

CpuReducer::~CpuReducer() = default;

std::unique_ptr<PowerSgdState> CpuReducer::make_powersgd(const std::vector<HookBucket>& buckets,
                                                         const PowerSgdOptions& options) {
  auto s = std::make_unique<HostPowerSgd>(buckets, options, world_size_, *transport_);
  powersgd_ = &s->host;
  return s;
}

double CpuReducer::now_ms() const {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - step_start_).count();
}

void CpuReducer::prepare_for_backward(std::chrono::steady_clock::time_point step_start) {
  core_.prepare_for_backward();
  step_start_ = step_start;
  copy_ms_.assign(bucket_.size(), 0.0);
  for (auto& b : bucket_) b->clear_marks();
  gather_.resize(bucket_.size());
}

GradBucket& CpuReducer::start_bucket(size_t b) {
  const Bucket& bk = core_.buckets()[b];
  float* p = (opts_.grad_as_bucket_view ? grads_ : bucket_buf_.data()) + bk.offset;
  if (!opts_.grad_as_bucket_view) {
    const double t0 = now_ms();
    std::memcpy(p, grads_ + bk.offset, bk.bytes());
    copy_ms_[b] += now_ms() - t0;
  }
  // ZeRO-1: the in-place reduce-scatter leaves the other ranks' chunks undefined, and backward
  // writes no layout padding: zero it, so padding that falls in this rank's chunk averages to 0.
  if (shard_)
    for (const auto& [first, n] : padding_[b]) std::fill(p + first, p + first + n, 0.0f);
  HostBucket& hb = *bucket_[b];
  hb.reset(p);
  hb.clear_marks();
  return hb;
}

void CpuReducer::all_gather(float* params) {
  if (!shard_) throw std::logic_error("CpuReducer::all_gather without --shard-optimizer");
  const int n = world_size_;
  std::vector<std::unique_ptr<HostWork>> work;
  for (const ShardSlice& s : shard_->slices()) {
    const Bucket& bk = core_.buckets()[s.bucket];
    std::vector<size_t> counts, displs;  // relative to the bucket's first element
    for (int r = 0; r < n; ++r) {
      const ShardSlice o = shard_->slice_of(s.bucket, r);
      counts.push_back(o.count);
      displs.push_back(o.flat_offset - bk.offset);
    }
    gather_.allgather_start_ms[s.bucket] = now_ms();
    work.push_back(transport_->start_all_gather(params + bk.offset, counts, displs, DType::F32));
  }
  for (size_t b = 0; b < work.size(); ++b) {
    work[b]->wait();
    gather_.allgather_end_ms[b] = now_ms();
    gather_.allgather_ms[b] = gather_.allgather_end_ms[b] - gather_.allgather_start_ms[b];
    gather_.allgather_bytes[b] = core_.buckets()[b].bytes();
  }
}

void CpuReducer::finish_buckets() {
  // Requests complete in launch order = bucket order; wait one by one to time each.
  for (auto& b : bucket_) b->complete();
  if (!opts_.grad_as_bucket_view) {
    for (size_t b = 0; b < bucket_.size(); ++b) {
      const Bucket& bk = core_.buckets()[b];
      const double t0 = now_ms();
      std::memcpy(grads_ + bk.offset, bucket_buf_.data() + bk.offset, bk.bytes());
      copy_ms_[b] += now_ms() - t0;
    }
  }
}

BucketTimes CpuReducer::times() const {
  BucketTimes t;
  t.resize(bucket_.size());
  for (size_t b = 0; b < bucket_.size(); ++b) {
    const HostBucket& hb = *bucket_[b];
    t.copy_ms[b] = copy_ms_[b];
    if (b < gather_.allgather_ms.size()) {
      t.allgather_start_ms[b] = gather_.allgather_start_ms[b];
      t.allgather_end_ms[b] = gather_.allgather_end_ms[b];
      t.allgather_ms[b] = gather_.allgather_ms[b];
      t.allgather_bytes[b] = gather_.allgather_bytes[b];
    }
    if (hb.empty()) continue;
    t.reduce_scattered[b] = shard_ ? 1 : 0;
    t.start_ms[b] = hb.start_ms();
    t.end_ms[b] = hb.end_ms();
    const BucketCommReport r = hb.report();
    t.bytes_sent[b] = r.bytes_sent;
    t.compressed[b] = r.compressed ? 1 : 0;
    t.compress_ms[b] = r.compress_ms;
    t.allreduce_ms[b] = r.allreduce_ms;
  }
  return t;
}

}  // namespace vitddp
