// PowerSGD gradient compression (Vogels, Karimireddy, Jaggi 2019), with the semantics of PyTorch's
// torch/distributed/algorithms/ddp_comm_hooks/powerSGD_hook.py (powerSGD_hook + PowerSGDState):
// the per-bucket plan (which tensors are low-rank approximated) shared by both backends, and the
// host implementation used by the CPU backend (behind mpi/hooks/powersgd_hook.cpp) and as the
// oracle of the GPU tests.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "mpi/buckets/bucket_times.h"
#include "mpi/reducer/reducer_options.h"

namespace vitddp {

/// PyTorch's _should_compress: a (n x m) matrix approximated with rank r is worth compressing iff
/// (n + m) * r * min_compression_rate < n * m.
bool powersgd_should_compress(size_t n, size_t m, size_t r, double min_compression_rate);

/// One tensor of a bucket, viewed as a matrix (shape[0], numel / shape[0]) (1-D tensors: (n, 1)).
struct PowerSgdTensorPlan {
  size_t offset = 0;         ///< first element in the bucket
  size_t numel = 0;
  size_t rows = 0, cols = 0; ///< n = shape[0], m = numel / n
  size_t rank = 0;           ///< r = min(n, m, matrix_approximation_rank)
  bool compressed = false;   ///< powersgd_should_compress(n, m, r, rate)
  size_t p_offset = 0;       ///< compressed: P (n x r, row-major) in the bucket's P memory
  size_t q_offset = 0;       ///< compressed: Q (m x r, row-major) in the bucket's Q memory
                             ///< (slots in PowerSgdBucketPlan::compressed_order)
  size_t u_offset = 0;       ///< uncompressed: position in the contiguous uncompressed buffer
};

/// What PowerSGD does with one bucket: tensors in bucket order with their P/Q/uncompressed slots,
/// laid out as PyTorch's p_memory_dict / q_memory_dict / torch.cat(uncompressed) are.
struct PowerSgdBucketPlan {
  size_t numel = 0;                        ///< bucket elements (padding included)
  std::vector<PowerSgdTensorPlan> tensors;
  size_t uncompressed_numel = 0;           ///< sum of numel of the uncompressed tensors
  size_t p_numel = 0, q_numel = 0;         ///< sum of n r and of m r over compressed tensors
  size_t compressed_count = 0;
  /// Indices into `tensors` of the compressed ones in PyTorch's order (grouped by (n, m) shape,
  /// groups in order of first appearance, bucket order inside a group): the order of their P/Q
  /// slots and of the initial Qs (PowerSgdQInit's ordinal).
  std::vector<size_t> compressed_order;
  /// Payload bytes all-reduced per compressed step: (uncompressed + P + Q) fp32 elements x 4.
  uint64_t bytes_per_step() const { return 4ull * (uncompressed_numel + p_numel + q_numel); }
};

/// Classifies the tensors of `b` for rank `rank` (>= 1) and `min_compression_rate` (>= 0).
/// Throws std::invalid_argument for rank < 1, a negative rate or an empty/zero-sized shape.
PowerSgdBucketPlan make_powersgd_plan(const HookBucket& b, int rank, double min_compression_rate);

/// The counter-based random stream of bucket `bucket`'s initial Qs drawn at iteration
/// `iteration` (value i of the bucket's Q memory = rand_normal(seed, stream, i), model/rng.h),
/// shared by the host and GPU implementations so that they draw the same Qs.
uint64_t powersgd_q_stream(size_t bucket, int64_t iteration);

/// Gram-Schmidt orthonormalisation of the columns of the (rows x cols) row-major matrix `a`, in
/// place (PyTorch's _orthogonalize_gram_schmidt): for each column i in order, col /= ||col||
/// (+ epsilon when epsilon != 0), then every later column loses its projection on col.
/// Norms and dot products accumulate in double. A zero column with epsilon 0 gives NaN, as in
/// PyTorch. (PyTorch switches to torch.linalg.qr for fp32 ranks > 2; that changes only the signs
/// of columns, which cancel in P Q^T.)
void orthogonalize_host(float* a, size_t rows, size_t cols, double epsilon);

/// The PowerSGD comm hook on the host, for every bucket of a model, with its state (error per
/// bucket, P and Q memories, iteration counter) as PowerSGDState keeps it.
///
/// run_bucket(b, data, allreduce) does, with n x m views M of the tensors of bucket b:
///  - iteration < start_iter: data /= world_size, allreduce(data) (DDP's _allreduce_fut);
///  - else: data += error[b] (zero the first time) and keep a copy; the uncompressed tensors are
///    concatenated, all-reduced and divided by world_size; Q is drawn (first time, or every time
///    without warm start) and orthogonalised, else the last Q is re-orthogonalised; P = M Q;
///    all-reduce of all Ps; orthogonalise each P; Q = M^T P; all-reduce of all Qs, / world_size;
///    M = P Q^T written into data; error[b] = copy - data (error feedback on).
/// end_step() increases the iteration counter: call it once per step after the last bucket (PyTorch
/// maybe_increase_iter at bucket.is_last()).
///
/// `allreduce` must sum `n` floats in place over all ranks (blocking); the oracle with one rank
/// passes a no-op. Arithmetic: fp32 storage, double accumulation in the GEMMs and norms.
class PowerSgdHost {
 public:
  using AllReduceSum = std::function<void(float* data, size_t n)>;

  /// `world_size` >= 1. Throws std::invalid_argument for bad options (see make_powersgd_plan).
  PowerSgdHost(std::vector<HookBucket> buckets, const PowerSgdOptions& options, int world_size);

  /// True when the next run_bucket compresses (iteration >= start_iter).
  bool compressing() const { return iter_ >= opts_.start_iter; }
  /// Runs the hook on bucket `b`'s `data` (plan(b).numel floats) in place. Times are host wall
  /// times: allreduce_ms inside `allreduce`, compress_ms the rest of the hook.
  BucketCommReport run_bucket(size_t b, float* data, const AllReduceSum& allreduce);
  void end_step() { ++iter_; }

  int64_t iteration() const { return iter_; }
  size_t bucket_count() const { return plans_.size(); }
  const PowerSgdBucketPlan& plan(size_t b) const { return plans_.at(b); }
  /// The local error of bucket b (empty until its first compressed step or without error feedback).
  const std::vector<float>& error(size_t b) const { return state_.at(b).error; }
  /// The bucket's Q memory after its last compressed step (all-reduced, divided by world size).
  const std::vector<float>& q_memory(size_t b) const { return state_.at(b).q; }

 private:
  struct BucketState {
    std::vector<float> error, p, q;
    bool q_ready = false;  ///< q holds last step's Q (warm start)
  };
  void init_q(size_t b);

  PowerSgdOptions opts_;
  int world_size_;
  std::vector<PowerSgdBucketPlan> plans_;
  std::vector<BucketState> state_;
  int64_t iter_ = 0;
};

}  // namespace vitddp
