#include "mpi/hooks/powersgd_host.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

#include "model/rng.h"

namespace vitddp {

bool powersgd_should_compress(size_t n, size_t m, size_t r, double min_compression_rate) {
  // PyTorch: compressed_size * min_compression_rate < uncompressed_size, in Python numbers.
  return static_cast<double>((n + m) * r) * min_compression_rate < static_cast<double>(n * m);
}

PowerSgdBucketPlan make_powersgd_plan(const HookBucket& b, int rank, double min_compression_rate) {
  if (rank < 1) throw std::invalid_argument("PowerSGD: matrix approximation rank must be >= 1, got " + std::to_string(rank));
  if (!(min_compression_rate >= 0))
    throw std::invalid_argument("PowerSGD: min compression rate must be >= 0, got " + std::to_string(min_compression_rate));
  PowerSgdBucketPlan plan;
  plan.numel = b.numel;
  for (const HookTensor& t : b.tensors) {
    if (t.shape.empty() || t.shape[0] <= 0 || t.numel == 0)
      throw std::invalid_argument("PowerSGD: a tensor of a bucket has an empty shape");
    PowerSgdTensorPlan p;
    p.offset = t.offset;
    p.numel = t.numel;
    p.rows = static_cast<size_t>(t.shape[0]);  // tensor.view(tensor.shape[0], -1)
    p.cols = t.numel / p.rows;
    p.rank = std::min({p.rows, p.cols, static_cast<size_t>(rank)});
    p.compressed = powersgd_should_compress(p.rows, p.cols, p.rank, min_compression_rate);
    if (!p.compressed) {
      p.u_offset = plan.uncompressed_numel;  // torch.cat(uncompressed tensors), bucket order
      plan.uncompressed_numel += p.numel;
    }
    plan.tensors.push_back(p);
  }
  // PyTorch groups the compressed matrices by (n, m) shape, groups in order of first appearance,
  // bucket order inside a group (shape_to_tensors), and lays out P/Q memory in that order.
  std::vector<std::pair<size_t, size_t>> shapes;
  for (const auto& t : plan.tensors)
    if (t.compressed && std::find(shapes.begin(), shapes.end(), std::make_pair(t.rows, t.cols)) == shapes.end())
      shapes.emplace_back(t.rows, t.cols);
  for (const auto& sh : shapes)
    for (size_t i = 0; i < plan.tensors.size(); ++i) {
      PowerSgdTensorPlan& p = plan.tensors[i];
      if (!p.compressed || p.rows != sh.first || p.cols != sh.second) continue;
      p.p_offset = plan.p_numel;
      p.q_offset = plan.q_numel;
      plan.p_numel += p.rows * p.rank;
      plan.q_numel += p.cols * p.rank;
      plan.compressed_order.push_back(i);
    }
  plan.compressed_count = plan.compressed_order.size();
  return plan;
}

uint64_t powersgd_q_stream(size_t bucket, int64_t iteration) {
  return mix64(0x50534744ull /* "PSGD" */ ^ (static_cast<uint64_t>(bucket) << 40)) + static_cast<uint64_t>(iteration);
}

void orthogonalize_host(float* a, size_t rows, size_t cols, double epsilon) {
  for (size_t i = 0; i < cols; ++i) {
    double ss = 0;
    for (size_t k = 0; k < rows; ++k) ss += (double)a[k * cols + i] * a[k * cols + i];
    const double norm = std::sqrt(ss) + (epsilon == 0 ? 0.0 : epsilon);
    for (size_t k = 0; k < rows; ++k) a[k * cols + i] = static_cast<float>(a[k * cols + i] / norm);
    for (size_t j = i + 1; j < cols; ++j) {
      double dot = 0;
      for (size_t k = 0; k < rows; ++k) dot += (double)a[k * cols + i] * a[k * cols + j];
      for (size_t k = 0; k < rows; ++k)
        a[k * cols + j] = static_cast<float>(a[k * cols + j] - dot * a[k * cols + i]);
    }
  }
}

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// P[n,r] = M[n,m] Q[m,r] (row-major; double accumulation).
void mq(const float* M, const float* Q, float* P, size_t n, size_t m, size_t r) {
  std::vector<double> acc(r);
  for (size_t i = 0; i < n; ++i) {
    std::fill(acc.begin(), acc.end(), 0.0);
    const float* row = M + i * m;
    for (size_t k = 0; k < m; ++k)
      for (size_t j = 0; j < r; ++j) acc[j] += (double)row[k] * Q[k * r + j];
    for (size_t j = 0; j < r; ++j) P[i * r + j] = static_cast<float>(acc[j]);
  }
}

// Q[m,r] = M[n,m]^T P[n,r].
void mtp(const float* M, const float* P, float* Q, size_t n, size_t m, size_t r) {
  std::vector<double> acc(m * r, 0.0);
  for (size_t i = 0; i < n; ++i) {
    const float* row = M + i * m;
    for (size_t k = 0; k < m; ++k)
      for (size_t j = 0; j < r; ++j) acc[k * r + j] += (double)row[k] * P[i * r + j];
  }
  for (size_t x = 0; x < m * r; ++x) Q[x] = static_cast<float>(acc[x]);
}

// M[n,m] = P[n,r] Q[m,r]^T.
void pqt(const float* P, const float* Q, float* M, size_t n, size_t m, size_t r) {
  for (size_t i = 0; i < n; ++i)
    for (size_t k = 0; k < m; ++k) {
      double s = 0;
      for (size_t j = 0; j < r; ++j) s += (double)P[i * r + j] * Q[k * r + j];
      M[i * m + k] = static_cast<float>(s);
    }
}

}  // namespace

PowerSgdHost::PowerSgdHost(std::vector<HookBucket> buckets, const PowerSgdOptions& options, int world_size)
    : opts_(options), world_size_(world_size) {
  if (world_size < 1) throw std::invalid_argument("PowerSgdHost: world size must be >= 1");
  if (opts_.start_iter < 0) throw std::invalid_argument("PowerSGD: start iteration must be >= 0");
  for (const HookBucket& b : buckets) plans_.push_back(make_powersgd_plan(b, opts_.rank, opts_.min_compression_rate));
  state_.resize(plans_.size());
}

void PowerSgdHost::init_q(size_t b) {
  const PowerSgdBucketPlan& plan = plans_[b];
  std::vector<float>& q = state_[b].q;
  q.assign(plan.q_numel, 0.0f);
  const uint64_t stream = powersgd_q_stream(b, iter_);
  for (size_t ordinal = 0; ordinal < plan.compressed_order.size(); ++ordinal) {
    const PowerSgdTensorPlan& t = plan.tensors[plan.compressed_order[ordinal]];
    float* qt = q.data() + t.q_offset;
    if (opts_.q_init) {
      opts_.q_init(b, ordinal, iter_, qt, t.cols, t.rank);
    } else {
      for (size_t i = 0; i < t.cols * t.rank; ++i)
        qt[i] = static_cast<float>(rand_normal(opts_.seed, stream, t.q_offset + i));
    }
  }
}

BucketCommReport PowerSgdHost::run_bucket(size_t b, float* data, const AllReduceSum& allreduce) {
  const PowerSgdBucketPlan& plan = plans_.at(b);
  BucketState& st = state_[b];
  BucketCommReport rep;
  const auto t_hook = Clock::now();
  auto timed_allreduce = [&](float* x, size_t n) {
    if (n == 0) return;
    const auto t = Clock::now();
    allreduce(x, n);
    rep.allreduce_ms += ms_since(t);
    rep.bytes_sent += 4ull * n;
  };
  const float ws = static_cast<float>(world_size_);

  if (!compressing()) {  // vanilla all-reduce: divide first, then sum
    for (size_t i = 0; i < plan.numel; ++i) data[i] /= ws;
    timed_allreduce(data, plan.numel);
    rep.compress_ms = ms_since(t_hook) - rep.allreduce_ms;
    return rep;
  }
  rep.compressed = plan.compressed_count > 0;

  // Error feedback: add last step's local error, keep a copy of the input.
  std::vector<float> copy;
  if (opts_.error_feedback) {
    if (st.error.empty()) {
      st.error.assign(plan.numel, 0.0f);
    } else {
      for (size_t i = 0; i < plan.numel; ++i) data[i] += st.error[i];
    }
    copy.assign(data, data + plan.numel);
  }

  // Uncompressed tensors: one contiguous buffer.
  std::vector<float> u(plan.uncompressed_numel);
  for (const auto& t : plan.tensors)
    if (!t.compressed) std::copy(data + t.offset, data + t.offset + t.numel, u.begin() + t.u_offset);

  // Q: random and orthogonalised the first time (every time without warm start), else the last
  // step's Q orthogonalised again.
  if (!opts_.warm_start || !st.q_ready) {
    init_q(b);
    st.q_ready = true;
  }
  st.p.assign(plan.p_numel, 0.0f);
  for (const auto& t : plan.tensors)
    if (t.compressed) orthogonalize_host(st.q.data() + t.q_offset, t.cols, t.rank, opts_.orthogonalization_epsilon);
  for (const auto& t : plan.tensors)
    if (t.compressed) mq(data + t.offset, st.q.data() + t.q_offset, st.p.data() + t.p_offset, t.rows, t.cols, t.rank);

  timed_allreduce(u.data(), u.size());
  for (float& x : u) x /= ws;
  for (const auto& t : plan.tensors)
    if (!t.compressed) std::copy(u.begin() + t.u_offset, u.begin() + t.u_offset + t.numel, data + t.offset);
  // Ps are not divided by the world size: they are orthogonalised next.
  timed_allreduce(st.p.data(), st.p.size());

  for (const auto& t : plan.tensors)
    if (t.compressed) {
      orthogonalize_host(st.p.data() + t.p_offset, t.rows, t.rank, opts_.orthogonalization_epsilon);
      mtp(data + t.offset, st.p.data() + t.p_offset, st.q.data() + t.q_offset, t.rows, t.cols, t.rank);
    }
  timed_allreduce(st.q.data(), st.q.size());
  for (float& x : st.q) x /= ws;
  for (const auto& t : plan.tensors)
    if (t.compressed) pqt(st.p.data() + t.p_offset, st.q.data() + t.q_offset, data + t.offset, t.rows, t.cols, t.rank);

  if (opts_.error_feedback)
    for (size_t i = 0; i < plan.numel; ++i) st.error[i] = copy[i] - data[i];
  // Without warm start PyTorch clears p_memory_dict / q_memory_dict, so the next step draws new
  // Qs: here init_q runs on every compressed step instead.
  rep.compress_ms = ms_since(t_hook) - rep.allreduce_ms;
  return rep;
}

}  // namespace vitddp
