#include "mpi/reducer/gpu_reducer_gpu.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "cuda/check/check_cuda.h"
#include "cuda/kernels/cast.h"
#include "cuda/kernels/compression.h"
#include "cuda/model/step_graph.h"
#include "mpi/buckets/bucket_timeline_gpu.h"
#include "mpi/world/nccl_check_gpu.h"
#include "src/io/nvtx.h"

namespace vitddp {

namespace {

// The transport's largest payload per bucket: the fp32 bucket.
std::vector<size_t> bucket_bytes(const std::vector<Bucket>& buckets) {
  std::vector<size_t> v;
  for (const auto& b : buckets) v.push_back(b.bytes());
  return v;
}

}  // namespace

// ---------------------------------------------------------------- the bucket on a comm stream

/// GradBucket on the GPU: every operation is enqueued on the bucket's comm stream (then() work
/// runs at once: the stream orders it after the all-reduces), marks are CUDA timing events.
class GpuReducer::DeviceBucket final : public GradBucket {
 public:
  DeviceBucket(size_t index, const HookBucket& tensors, int world_size, cudaStream_t stream, uint16_t* staging,
               const GpuReducer& owner)
      : GradBucket(index, tensors, world_size), stream_(stream), staging_(staging), owner_(owner), timeline_(8) {}

  uint16_t* staging_16bit() override { return staging_; }

  void all_reduce(void* data, size_t count, DType t, ReduceOp op) override {
    const int start = start_mark();
    owner_.transport_->all_reduce(index(), data, count, t, op, stream_);
    enqueued();
    allreduce(start, mark(), count * dtype_bytes(t));
  }

  void reduce_scatter(void* data, size_t count, DType t, ReduceOp op) override {
    const int start = start_mark();
    owner_.transport_->reduce_scatter(index(), data, count, t, op, stream_);
    enqueued();
    allreduce(start, mark(), count * dtype_bytes(t));
  }

  bool all_reduce_16bit_fused(float* x, uint16_t* staging, size_t count, DType t, float divisor) override {
    GpuTransport& tr = *owner_.transport_;
    if (!tr.fuses_16bit_casts()) return false;
    const int e0 = mark();
    int marks[2] = {-1, -1}, k = 0;
    tr.all_reduce_16bit(index(), x, staging, count, t, divisor, stream_, [&] {
      if (k == 2) throw std::logic_error("all_reduce_16bit: more than two timing marks");
      marks[k++] = mark();
    });
    if (k != 2) throw std::logic_error("all_reduce_16bit: expected two timing marks");
    enqueued();
    const int e3 = mark();
    compress(e0, marks[0]);
    allreduce(marks[0], marks[1], count * dtype_bytes(t));
    compress(marks[1], e3);
    return true;
  }

  void then(std::function<void()> fn) override { fn(); }

  BucketTimeline& timeline() { return timeline_; }
  const BucketTimeline& timeline() const { return timeline_; }

 private:
  void do_cast_to_16bit(const float* x, size_t n, float divisor, DType t, uint16_t* out) override {
    ::vitddp::cast_to_16bit(x, n, divisor, t, out, stream_);
  }
  void do_cast_from_16bit(const uint16_t* h, size_t n, DType t, float* x) override {
    ::vitddp::cast_from_16bit(h, n, t, x, stream_);
  }
  int record_mark() override { return timeline_.mark(stream_); }
  double interval_ms(int a, int b) const override { return timeline_.elapsed_ms(a, b); }

  cudaStream_t stream_;
  uint16_t* staging_;
  const GpuReducer& owner_;
  BucketTimeline timeline_;
};

/// Plans PowerSGD's device state without allocating it.
class GpuReducer::Planner final : public HookBackend {
 public:
  std::unique_ptr<PowerSgdState> make_powersgd(const std::vector<HookBucket>&, const PowerSgdOptions&) override {
    throw std::logic_error("GpuReducer::planned_device_bytes: a planned hook allocates nothing");
  }
  size_t planned_powersgd_bytes(const std::vector<HookBucket>& b, const PowerSgdOptions& o) const override {
    return PowerSgdGpu::planned_device_bytes(b, o);
  }
};

// ---------------------------------------------------------------- the reducer

GpuReducer::GpuReducer(const ParamLayout& layout, std::vector<Bucket> buckets, float* d_grads, ncclComm_t comm,
                       cudaStream_t compute, const ReducerOptions& options)
    : core_(layout, std::move(buckets), options.overlap), d_grads_(d_grads), comm_(comm), compute_(compute),
      opts_(options) {
  if (opts_.comm_streams < 1 || opts_.comm_streams > 4)
    throw std::invalid_argument("GpuReducer: comm_streams " + std::to_string(opts_.comm_streams) + " outside [1, 4]");
  const GpuTransportEntry& transport = gpu_transport(opts_.allreduce);
  NCCL_CHECK(ncclCommCount(comm_, &world_size_));
  hook_buckets_ = hook_buckets(layout, core_.buckets());
  plan_ = transport.plan(opts_, world_size_, bucket_bytes(core_.buckets()));
  hook_ = make_comm_hook(opts_.compression, HookArgs{hook_buckets_, opts_, world_size_, *this});
  if (hook_->reduces_own_buffers() && plan_.registered_buffers_only)
    throw std::invalid_argument(std::string("GpuReducer: the ") + hook_->name() +
                                " hook all-reduces buffers of its own on the first comm stream, which the " +
                                transport.name + " all-reduce cannot reach; they cannot be combined");
  if (opts_.shard_optimizer && !plan_.shards)
    throw std::invalid_argument(std::string("GpuReducer: the ") + transport.name +
                                " transport has no reduce-scatter and all-gather for the sharded optimizer");
  if (opts_.shard_optimizer && !opts_.grad_as_bucket_view)
    throw std::invalid_argument("GpuReducer: the sharded optimizer needs grad_as_bucket_view (the reduce-scatter "
                                "writes the shard's gradients, there is no averaged bucket to copy back)");
  try {
    create(layout);
  } catch (...) {
    release();  // the destructor does not run for a constructor that throws
    throw;
  }
  core_.attach(*hook_, *this);
}

void GpuReducer::create(const ParamLayout& layout) {
  // The comm streams get the highest priority so communication kernels are scheduled as soon as
  // backward leaves room for them.
  int lo = 0, hi = 0;
  CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
  for (int i = 0; i < plan_.comm_streams; ++i) {
    cudaStream_t st = nullptr;
    CUDA_CHECK(cudaStreamCreateWithPriority(&st, cudaStreamNonBlocking, hi));
    comm_streams_.push_back(st);
    cudaEvent_t e = nullptr;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    comm_joined_.push_back(e);
    if (hook_->uses_16bit_staging())
      half_.emplace_back(max_bucket_numel(core_.buckets()),
                         "16-bit gradient staging buffer (comm stream " + std::to_string(i) + ")");
  }
  hook_->allocate();  // PowerSGD's state, on the first comm stream
  const size_t nb = core_.buckets().size();
  ready_.resize(nb);
  for (auto& e : ready_) CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  for (size_t b = 0; b < nb; ++b) {
    const size_t si = b % comm_streams_.size();
    bucket_.push_back(std::make_unique<DeviceBucket>(b, hook_buckets_[b], world_size_, comm_streams_[si],
                                                     half_.empty() ? nullptr : half_[si].get(), *this));
  }
  CUDA_CHECK(cudaEventCreateWithFlags(&comm_done_, cudaEventDisableTiming));
  if (opts_.shard_optimizer) {
    int rank = 0;
    NCCL_CHECK(ncclCommUserRank(comm_, &rank));
    shard_ = std::make_unique<ShardPlan>(core_.buckets(), world_size_, rank);
    for (int set = 0; set < 2; ++set) {
      gather_ev_[set].resize(2 * nb);
      for (auto& e : gather_ev_[set]) CUDA_CHECK(cudaEventCreate(&e));
      gathered_[set].resize(nb);
      for (auto& e : gathered_[set]) CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      CUDA_CHECK(cudaEventCreateWithFlags(&params_ready_[set], cudaEventDisableTiming));
    }
    for (cudaEvent_t* e : {&gather_go_, &flag_go_, &flag_done_}) CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
  }
  if (!opts_.grad_as_bucket_view) {
    copy_ev_.resize(4 * nb);
    for (auto& e : copy_ev_) CUDA_CHECK(cudaEventCreate(&e));
    d_bucket_ = DeviceBuffer<float>(layout.total, "DDP bucket buffer (--grad-as-bucket-view off)");
    CUDA_CHECK(cudaMemset(d_bucket_.get(), 0, layout.total * sizeof(float)));  // padding stays 0
  }
  CUDA_CHECK(cudaDeviceSynchronize());  // memsets on the legacy stream before the comm stream runs
  GpuTransportArgs args{comm_, world_size_, opts_, {{d_grads_, layout.total * sizeof(float)}},
                        bucket_bytes(core_.buckets())};
  if (d_bucket_.get()) args.regions.emplace_back(d_bucket_.get(), d_bucket_.size() * sizeof(float));
  for (auto& h : half_) args.regions.emplace_back(h.get(), h.size() * sizeof(uint16_t));
  transport_ = gpu_transport(opts_.allreduce).make(args);
}

GpuReducer::~GpuReducer() { release(); }

void GpuReducer::release() {
  // Every stream drained first, then the work's events and buffers, then the streams.
  for (auto st : comm_streams_) cudaStreamSynchronize(st);
  transport_.reset();
  hook_.reset();
  powersgd_ = nullptr;
  bucket_.clear();
  for (auto* v : {&ready_, &copy_ev_, &comm_joined_, &gather_ev_[0], &gather_ev_[1], &gathered_[0], &gathered_[1]}) {
    for (auto e : *v) cudaEventDestroy(e);
    v->clear();
  }
  for (cudaEvent_t* e : {&comm_done_, &gather_go_, &params_ready_[0], &params_ready_[1], &flag_go_, &flag_done_}) {
    if (*e) cudaEventDestroy(*e);
    *e = nullptr;
  }
  for (auto st : comm_streams_) cudaStreamDestroy(st);
  comm_streams_.clear();
}

std::unique_ptr<PowerSgdState> GpuReducer::make_powersgd(const std::vector<HookBucket>& buckets,
                                                         const PowerSgdOptions& options) {
  auto s = std::make_unique<PowerSgdGpu>(buckets, options, world_size_, comm_stream());
  powersgd_ = s.get();
  return s;
}

size_t GpuReducer::planned_powersgd_bytes(const std::vector<HookBucket>& buckets, const PowerSgdOptions& options) const {
  return PowerSgdGpu::planned_device_bytes(buckets, options);
}

size_t GpuReducer::device_bytes() const {
  size_t half = 0;
  for (const auto& h : half_) half += h.size() * sizeof(uint16_t);
  return d_bucket_.size() * sizeof(float) + half + (hook_ ? hook_->device_bytes() : 0) +
         (transport_ ? transport_->device_bytes() : 0);
}

size_t GpuReducer::planned_device_bytes(const ParamLayout& layout, const std::vector<Bucket>& buckets,
                                        const ReducerOptions& options, int world_size) {
  const std::vector<HookBucket> hooks = hook_buckets(layout, buckets);
  Planner planner;
  const std::unique_ptr<CommHook> hook = make_comm_hook(options.compression, HookArgs{hooks, options, world_size, planner});
  const GpuTransportPlan plan = gpu_transport(options.allreduce).plan(options, world_size, bucket_bytes(buckets));
  size_t n = 0;
  if (!options.grad_as_bucket_view) n += layout.total * sizeof(float);
  if (hook->uses_16bit_staging())  // one 16-bit staging buffer per comm stream
    n += static_cast<size_t>(std::max(plan.comm_streams, 1)) * max_bucket_numel(buckets) * sizeof(uint16_t);
  return n + hook->planned_device_bytes() + plan.device_bytes;
}

void GpuReducer::prepare_for_backward() {
  core_.prepare_for_backward();
  step_started_ = false;
}

void GpuReducer::agree_nonfinite(int* d_flag, cudaStream_t stream) {
  if (!shard_) throw std::logic_error("GpuReducer::agree_nonfinite without --shard-optimizer");
  CUDA_CHECK(cudaEventRecord(flag_go_, stream));
  CUDA_CHECK(cudaStreamWaitEvent(comm_stream(), flag_go_, 0));
  transport_->max_over_ranks(d_flag, comm_stream());
  CUDA_CHECK(cudaEventRecord(flag_done_, comm_stream()));
  CUDA_CHECK(cudaStreamWaitEvent(stream, flag_done_, 0));
}

int GpuReducer::gather_buckets(cudaStream_t stream, size_t elem_bytes, const BucketWork& collective,
                               const BucketWork& after) {
  if (!shard_) throw std::logic_error("GpuReducer::all_gather without --shard-optimizer");
  const int set = gather_calls_++ % 2;
  gather_elem_bytes_[set] = elem_bytes;
  cudaStream_t cs = comm_stream();
  CUDA_CHECK(cudaEventRecord(gather_go_, stream));
  CUDA_CHECK(cudaStreamWaitEvent(cs, gather_go_, 0));
  // Last bucket first: the order the next forward reads them (the patch embedding's bucket is the
  // last, the head's the first), so its first blocks need not wait for the head's all-gather.
  for (auto it = core_.buckets().rbegin(); it != core_.buckets().rend(); ++it) {
    const Bucket& bk = *it;
    NvtxRange range("all-gather bucket " + std::to_string(bk.index), NvtxColor::Orange);
    CUDA_CHECK(cudaEventRecord(gather_ev_[set][2 * bk.index], cs));
    collective(bk, cs);
    CUDA_CHECK(cudaEventRecord(gather_ev_[set][2 * bk.index + 1], cs));
    after(bk, cs);
    CUDA_CHECK(cudaEventRecord(gathered_[set][bk.index], cs));
  }
  CUDA_CHECK(cudaEventRecord(params_ready_[set], cs));
  return set;
}

int GpuReducer::all_gather(float* d_params, __nv_bfloat16* d_bf16, cudaStream_t stream) {
  return gather_buckets(
      stream, sizeof(float),
      [&](const Bucket& bk, cudaStream_t cs) {
        transport_->all_gather(bk.index, d_params + bk.offset, bk.numel, DType::F32, cs);
      },
      [&](const Bucket& bk, cudaStream_t cs) {
        // The model's bf16 working copy follows the gathered parameters (it is not the optimizer's).
        if (d_bf16) convert_to_bf16(d_params + bk.offset, d_bf16 + bk.offset, bk.numel, cs);
      });
}

int GpuReducer::all_gather_bf16(__nv_bfloat16* d_bf16, float* d_params,
                                const std::vector<std::vector<FlatRange>>& fp32_read, cudaStream_t stream) {
  if (fp32_read.size() != core_.buckets().size())
    throw std::invalid_argument("GpuReducer::all_gather_bf16: " + std::to_string(fp32_read.size()) +
                                " range lists for " + std::to_string(core_.buckets().size()) + " buckets");
  return gather_buckets(
      stream, sizeof(__nv_bfloat16),
      [&](const Bucket& bk, cudaStream_t cs) {
        transport_->all_gather(bk.index, d_bf16 + bk.offset, bk.numel, DType::BF16, cs);
      },
      [&](const Bucket& bk, cudaStream_t cs) {
        // The parameters the bf16 model reads in fp32 become float(bf16): every rank's model then
        // reads the same values, the rounds of the masters.
        upcast_bf16_ranges(d_bf16, d_params, fp32_read[bk.index], cs);
      });
}

void upcast_bf16_ranges(const __nv_bfloat16* d_bf16, float* d_params, const std::vector<FlatRange>& ranges,
                        cudaStream_t stream) {
  for (const FlatRange& r : ranges)
    cast_from_16bit(reinterpret_cast<const uint16_t*>(d_bf16 + r.offset), r.count, DType::BF16, d_params + r.offset,
                    stream);
}

void GpuReducer::gather_times(int set, cudaEvent_t from, BucketTimes* t) const {
  if (!shard_) throw std::logic_error("GpuReducer::gather_times without --shard-optimizer");
  const std::vector<cudaEvent_t>& ev = gather_ev_[set & 1];
  for (size_t b = 0; b < core_.buckets().size(); ++b) {
    float a = 0, e = 0;
    CUDA_CHECK(cudaEventElapsedTime(&a, from, ev[2 * b]));
    CUDA_CHECK(cudaEventElapsedTime(&e, from, ev[2 * b + 1]));
    t->allgather_start_ms.at(b) = a;
    t->allgather_end_ms.at(b) = e;
    t->allgather_ms.at(b) = e - a;
    t->allgather_bytes.at(b) = core_.buckets()[b].numel * gather_elem_bytes_[set & 1];
  }
}

GradBucket& GpuReducer::start_bucket(size_t b) {
  const Bucket& bk = core_.buckets()[b];
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
  cudaStream_t cs = comm_streams_[b % comm_streams_.size()];
  // On the compute stream, before the ready event: every comm stream is ordered after it, and
  // inside a capture it becomes a graph node (a comm stream joins a capture only at its wait).
  if (!step_started_) transport_->begin_step(compute_);
  step_started_ = true;
  CUDA_CHECK(cudaEventRecord(ready_[b], compute_));
  CUDA_CHECK(cudaStreamWaitEvent(cs, ready_[b], 0));
  DeviceBucket& db = *bucket_[b];
  db.timeline().reset();
  db.reset(p);
  return db;
}

void GpuReducer::finish_buckets() {
  // Stream 0 joins the other comm streams that ran a bucket: every bucket is launched by now, and
  // bucket b ran on stream b mod size(), so those are the streams below the bucket count.
  const size_t ran = std::min(core_.buckets().size(), comm_streams_.size());
  for (size_t i = 1; i < ran; ++i) {
    CUDA_CHECK(cudaEventRecord(comm_joined_[i], comm_streams_[i]));
    CUDA_CHECK(cudaStreamWaitEvent(comm_stream(), comm_joined_[i], 0));
  }
  transport_->end_step(comm_stream());  // copy engine: the non-finite exchange
  CUDA_CHECK(cudaEventRecord(comm_done_, comm_stream()));
  CUDA_CHECK(cudaStreamWaitEvent(compute_, comm_done_, 0));
  if (!opts_.grad_as_bucket_view) {
    // DDP's copy of the averaged bucket back into the gradients before the optimizer.
    for (size_t b = 0; b < core_.buckets().size(); ++b) {
      const Bucket& bk = core_.buckets()[b];
      record_timing_event(copy_ev_[4 * b + 2], compute_);
      CUDA_CHECK(cudaMemcpyAsync(d_grads_ + bk.offset, d_bucket_.get() + bk.offset, bk.bytes(),
                                 cudaMemcpyDeviceToDevice, compute_));
      record_timing_event(copy_ev_[4 * b + 3], compute_);
    }
  }
}

BucketTimes GpuReducer::times(cudaEvent_t step_start) const {
  BucketTimes t;
  t.resize(bucket_.size());
  for (size_t b = 0; b < bucket_.size(); ++b) {
    const DeviceBucket& db = *bucket_[b];
    const BucketTimeline& tl = db.timeline();
    if (tl.empty()) continue;
    t.reduce_scattered[b] = shard_ ? 1 : 0;
    t.start_ms[b] = tl.start_ms(step_start);
    t.end_ms[b] = tl.end_ms(step_start);
    const BucketCommReport r = db.report();
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
