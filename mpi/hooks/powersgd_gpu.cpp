#include "mpi/hooks/powersgd_gpu.h"

#include <algorithm>
#include <climits>
#include <stdexcept>
#include <string>

#include "cuda/check/check_cuda.h"

namespace vitddp {

namespace {

template <typename T>
DeviceBuffer<T> upload(const std::vector<T>& v, const std::string& what) {
  DeviceBuffer<T> d(v.size(), what);
  if (!v.empty()) CUDA_CHECK(cudaMemcpy(d.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

}  // namespace

PowerSgdGpu::PowerSgdGpu(std::vector<HookBucket> buckets, const PowerSgdOptions& options, int world_size,
                         cudaStream_t stream)
    : opts_(options), world_size_(world_size), stream_(stream) {
  if (world_size < 1) throw std::invalid_argument("PowerSgdGpu: world size must be >= 1");
  if (opts_.start_iter < 0) throw std::invalid_argument("PowerSGD: start iteration must be >= 0");
  size_t max_numel = 0, max_u = 0, max_scratch = 0;
  state_.resize(buckets.size());
  for (size_t b = 0; b < buckets.size(); ++b) {
    plans_.push_back(make_powersgd_plan(buckets[b], opts_.rank, opts_.min_compression_rate));
    const PowerSgdBucketPlan& pl = plans_.back();
    BucketState& st = state_[b];
    std::vector<CopySegment> gather, scatter;
    std::vector<MatrixRef> p_refs, q_refs;
    for (const auto& t : pl.tensors) {
      if (t.rows > INT_MAX || t.cols > INT_MAX)
        throw std::invalid_argument("PowerSGD: a tensor of bucket " + std::to_string(b) + " is too large");
      if (t.compressed) {
        p_refs.push_back(MatrixRef{t.p_offset, (int)t.rows, (int)t.rank});
        q_refs.push_back(MatrixRef{t.q_offset, (int)t.cols, (int)t.rank});
        max_scratch = std::max(max_scratch, matmul_mtp_scratch_floats((int)t.rows, (int)t.cols, (int)t.rank));
      } else {
        gather.push_back(CopySegment{t.offset, t.u_offset, t.numel});
        scatter.push_back(CopySegment{t.u_offset, t.offset, t.numel});
        st.max_segment = std::max(st.max_segment, t.numel);
      }
    }
    const std::string tag = " (PowerSGD, bucket " + std::to_string(b) + ")";
    st.gather = upload(gather, "uncompressed gather table" + tag);
    st.scatter = upload(scatter, "uncompressed scatter table" + tag);
    st.p_refs = upload(p_refs, "P table" + tag);
    st.q_refs = upload(q_refs, "Q table" + tag);
    st.p = DeviceBuffer<float>(pl.p_numel, "P memory" + tag);
    st.q = DeviceBuffer<float>(pl.q_numel, "Q memory" + tag);
    if (opts_.error_feedback) {
      st.error = DeviceBuffer<float>(pl.numel, "error feedback" + tag);
      CUDA_CHECK(cudaMemset(st.error.get(), 0, pl.numel * sizeof(float)));  // zero the first time
    }
    max_numel = std::max(max_numel, pl.numel);
    max_u = std::max(max_u, pl.uncompressed_numel);
  }
  if (opts_.error_feedback) copy_ = DeviceBuffer<float>(max_numel, "PowerSGD input copy");
  u_ = DeviceBuffer<float>(max_u, "PowerSGD uncompressed buffer");
  mtp_scratch_ = DeviceBuffer<float>(max_scratch, "PowerSGD M^T P scratch");
  // The memsets above ran on the legacy default stream, which the non-blocking comm stream does
  // not wait for.
  CUDA_CHECK(cudaDeviceSynchronize());
  if (device_bytes() != planned_device_bytes(buckets, opts_))
    throw std::logic_error("PowerSgdGpu: planned_device_bytes disagrees with the allocation (update both)");
}

size_t PowerSgdGpu::planned_device_bytes(const std::vector<HookBucket>& buckets, const PowerSgdOptions& options) {
  size_t n = 0, max_numel = 0, max_u = 0, max_scratch = 0;
  for (const HookBucket& b : buckets) {
    const PowerSgdBucketPlan pl = make_powersgd_plan(b, options.rank, options.min_compression_rate);
    for (const auto& t : pl.tensors) {
      if (t.compressed) {
        n += 2 * sizeof(MatrixRef);  // its P and Q table entries
        max_scratch = std::max(max_scratch, matmul_mtp_scratch_floats((int)t.rows, (int)t.cols, (int)t.rank));
      } else {
        n += 2 * sizeof(CopySegment);  // gather and scatter entries
      }
    }
    n += (pl.p_numel + pl.q_numel + (options.error_feedback ? pl.numel : 0)) * sizeof(float);
    max_numel = std::max(max_numel, pl.numel);
    max_u = std::max(max_u, pl.uncompressed_numel);
  }
  return n + ((options.error_feedback ? max_numel : 0) + max_u + max_scratch) * sizeof(float);
}

size_t PowerSgdGpu::device_bytes() const {
  size_t n = (copy_.size() + u_.size() + mtp_scratch_.size()) * sizeof(float);
  for (const auto& st : state_)
    n += (st.error.size() + st.p.size() + st.q.size()) * sizeof(float) +
         (st.gather.size() + st.scatter.size()) * sizeof(CopySegment) +
         (st.p_refs.size() + st.q_refs.size()) * sizeof(MatrixRef);
  return n;
}

void PowerSgdGpu::init_q(size_t b) {
  const PowerSgdBucketPlan& pl = plans_[b];
  BucketState& st = state_[b];
  if (pl.q_numel == 0) return;
  if (!opts_.q_init) {
    fill_normal(st.q.get(), pl.q_numel, opts_.seed, powersgd_q_stream(b, iter_), stream_);
    return;
  }
  // Test hook: Qs made on the host. A pageable async copy returns once the source is staged.
  std::vector<float> host(pl.q_numel, 0.0f);
  for (size_t ordinal = 0; ordinal < pl.compressed_order.size(); ++ordinal) {
    const PowerSgdTensorPlan& t = pl.tensors[pl.compressed_order[ordinal]];
    opts_.q_init(b, ordinal, iter_, host.data() + t.q_offset, t.cols, t.rank);
  }
  CUDA_CHECK(cudaMemcpyAsync(st.q.get(), host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void PowerSgdGpu::run_bucket(GradBucket& gb) {
  if (!compressing()) throw std::logic_error("PowerSgdGpu::run_bucket before the start iteration");
  const size_t b = gb.index();
  float* d = gb.buffer();
  const PowerSgdBucketPlan& pl = plans_.at(b);
  BucketState& st = state_[b];
  const int nc = static_cast<int>(pl.compressed_count);
  const int nu = static_cast<int>(pl.tensors.size()) - nc;
  const float ws = static_cast<float>(world_size_);
  float* p = st.p.get();
  float* q = st.q.get();
  gb.set_compressed(nc > 0);
  // The kernels below go to stream_ directly; every all_reduce follows a fresh mark, so it times
  // from there (GradBucket::all_reduce).

  // Compression: error feedback, gather of the uncompressed tensors, Q, P = M Q.
  const int e0 = gb.mark();
  if (opts_.error_feedback) add_error_and_copy(d, st.error.get(), copy_.get(), pl.numel, stream_);
  copy_segments(d, u_.get(), st.gather.get(), nu, st.max_segment, 1.0f, stream_);
  if (!opts_.warm_start || !st.q_ready) {
    init_q(b);
    st.q_ready = true;
  }
  orthogonalize_columns(q, st.q_refs.get(), nc, (float)opts_.orthogonalization_epsilon, stream_);
  for (const auto& t : pl.tensors)
    if (t.compressed) matmul_mq(d + t.offset, q + t.q_offset, p + t.p_offset, (int)t.rows, (int)t.cols, (int)t.rank, stream_);
  gb.compress(e0, gb.mark());

  // All-reduce the uncompressed tensors and the Ps (SUM; Ps are orthogonalised, not divided).
  if (pl.uncompressed_numel > 0) gb.all_reduce(u_.get(), pl.uncompressed_numel, DType::F32, ReduceOp::Sum);
  if (pl.p_numel > 0) gb.all_reduce(p, pl.p_numel, DType::F32, ReduceOp::Sum);

  // Uncompressed tensors back (divided by the world size); orthogonalise P; Q = M^T P.
  const int e2 = gb.last_mark();  // the end of the last all-reduce (or of the compression)
  copy_segments(u_.get(), d, st.scatter.get(), nu, st.max_segment, ws, stream_);
  orthogonalize_columns(p, st.p_refs.get(), nc, (float)opts_.orthogonalization_epsilon, stream_);
  for (const auto& t : pl.tensors)
    if (t.compressed)
      matmul_mtp(d + t.offset, p + t.p_offset, q + t.q_offset, (int)t.rows, (int)t.cols, (int)t.rank,
                 mtp_scratch_.get(), stream_);
  gb.compress(e2, gb.mark());

  if (pl.q_numel > 0) gb.all_reduce(q, pl.q_numel, DType::F32, ReduceOp::Sum);

  // Decompression: Q /= world size, M = P Q^T, error = copy - new bucket.
  const int e4 = gb.last_mark();
  divide(q, pl.q_numel, ws, stream_);
  for (const auto& t : pl.tensors)
    if (t.compressed) matmul_pqt(p + t.p_offset, q + t.q_offset, d + t.offset, (int)t.rows, (int)t.cols, (int)t.rank, stream_);
  if (opts_.error_feedback) subtract(copy_.get(), d, st.error.get(), pl.numel, stream_);
  gb.compress(e4, gb.mark());
}

std::vector<float> PowerSgdGpu::error_to_host(size_t b) const {
  const BucketState& st = state_.at(b);
  std::vector<float> h(st.error.size());
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (!h.empty()) CUDA_CHECK(cudaMemcpy(h.data(), st.error.get(), h.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return h;
}

}  // namespace vitddp
