// DDP communication hooks: what a bucket goes through between "ready" and "averaged" when
// gradients are compressed (PyTorch torch/distributed/algorithms/ddp_comm_hooks), the reducer
// options that select them, and their host (CPU) building blocks.
//
// - none:     the bucket is averaged in fp32 (DDP's default allreduce hook).
// - fp16/bf16 (default_hooks.fp16_compress_hook / bf16_compress_hook): the fp32 bucket is cast to
//             16 bits while divided by the world size, all-reduced with SUM in 16 bits and cast back
//             into the fp32 bucket. Half the bytes on the wire.
// - powersgd  (powerSGD_hook.powerSGD_hook, Vogels et al. 2019): see mpi/powersgd.h.
#pragma once
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/param_layout.h"
#include "mpi/buckets.h"

namespace vitddp {

/// The gradient compression a reducer applies to every bucket (--compression).
enum class Compression { None, Fp16, Bf16, PowerSgd };

/// The GPU reducer's all-reduce implementation (--allreduce nccl|copy-engine).
enum class AllReduceImpl { Nccl, CopyEngine };

/// "none", "fp16", "bf16", "powersgd".
std::string compression_name(Compression c);
/// Inverse of compression_name. Throws std::invalid_argument naming the value and the choices.
Compression parse_compression(const std::string& name);
/// The accepted names, for --help and error messages.
std::vector<std::string> compression_names();

/// Called to fill the initial (not yet orthogonalised) Q of one compressed tensor: `q` is an
/// (m x r) fp32 row-major matrix, `ordinal` the tensor's position among the *compressed* tensors
/// of bucket `bucket` in PyTorch's order (PowerSgdBucketPlan::compressed_order: grouped by shape),
/// `iteration` the PowerSGD iteration counter when Q is drawn.
/// Test hook only (to inject the Qs PyTorch drew); the default draws standard normal numbers.
using PowerSgdQInit =
    std::function<void(size_t bucket, size_t ordinal, int64_t iteration, float* q, size_t m, size_t r)>;

/// PowerSGD hyper-parameters; the defaults are PyTorch's PowerSGDState defaults
/// (matrix_approximation_rank=1, start_powerSGD_iter=1000, min_compression_rate=2,
/// use_error_feedback=True, warm_start=True, orthogonalization_epsilon=0,
/// batch_tensors_with_same_shape=False).
struct PowerSgdOptions {
  int rank = 1;                     ///< matrix_approximation_rank (>= 1)
  /// start_powerSGD_iter: plain all-reduce while iter < start_iter. PyTorch refuses values <= 1
  /// with error feedback or warm start because DDP rebuilds its buckets after iteration 0; the
  /// buckets here are fixed from the start, so 0 and 1 are allowed.
  int64_t start_iter = 1000;
  double min_compression_rate = 2;  ///< compress a tensor iff (n + m) r * rate < n m
  bool error_feedback = true;       ///< use_error_feedback
  bool warm_start = true;           ///< warm_start: reuse last step's Q
  double orthogonalization_epsilon = 0;  ///< Gram-Schmidt: col /= (norm + eps)
  /// Seed of the initial Qs (identical on every rank, so every rank draws the same Q; PyTorch:
  /// random_seed). The values differ from PyTorch's generator; only their distribution matches.
  uint64_t seed = 0;
  PowerSgdQInit q_init;             ///< test hook: overrides the random initial Qs (empty: default)
};

/// Everything a reducer (NcclReducer, MpiReducer) needs besides buffers and communicator.
/// Default-constructed: DDP's defaults (overlap, gradient_as_bucket_view=True, no compression).
struct ReducerOptions {
  bool overlap = true;              ///< false (--no-overlap): every bucket starts after backward
  /// true (PyTorch gradient_as_bucket_view=True): the gradients are the bucket, reduced in place.
  /// false: a separate flat bucket buffer; a ready bucket's gradients are copied into it
  /// (device-to-device for the GPU), it is all-reduced, and copied back into the gradients in
  /// finalize(), before the optimizer (PyTorch's default gradient_as_bucket_view=False).
  bool grad_as_bucket_view = true;
  Compression compression = Compression::None;
  PowerSgdOptions powersgd;         ///< used when compression == PowerSgd
  /// GPU backend: who moves the bucket (mpi/ce_allreduce_gpu.h). Nccl: ncclAllReduce (SM-driven
  /// kernels); CopyEngine: peer-to-peer copies by the copy engines plus a short sum kernel, for
  /// ranks on one node (--allreduce copy-engine). Not with PowerSGD.
  AllReduceImpl allreduce = AllReduceImpl::Nccl;
  /// The comm streams the buckets of a step alternate over (bucket b on stream b mod
  /// comm_streams), each with its own 16-bit staging buffer when compressing to fp16/bf16, so
  /// one bucket's sum and all-gather overlap the next one's reduce-scatter. 1 to 4, checked by
  /// NcclReducer always; used only with CopyEngine on more than one rank.
  int comm_streams = 1;
};

/// Whether a GPU reducer with these options on `world_size` ranks all-reduces by the copy engines
/// (CopyEngineAllReduce): allreduce == CopyEngine and more than one rank (one rank has nothing to
/// move, and its reducer allocates no copy-engine scratch).
inline bool uses_copy_engine(const ReducerOptions& o, int world_size) {
  return o.allreduce == AllReduceImpl::CopyEngine && world_size > 1;
}

/// What one bucket's communication did in one step (for the results file).
struct BucketCommReport {
  uint64_t bytes_sent = 0;   ///< sum over this rank's all-reduce calls of their payload bytes
  bool compressed = false;   ///< the payload was compressed (see BucketTimes::compressed)
  double compress_ms = 0;    ///< compression + decompression work
  double allreduce_ms = 0;   ///< inside the all-reduce calls
};

/// One parameter tensor of a bucket as a comm hook sees it (bucket.gradients() in PyTorch).
struct HookTensor {
  size_t offset = 0;             ///< first element, relative to the bucket's first element
  std::vector<int64_t> shape;    ///< the parameter's shape (numel = product)
  size_t numel = 0;
};

/// A bucket as a comm hook sees it: `numel` contiguous fp32 elements (layout padding included;
/// padding belongs to no tensor) holding `tensors` in bucket order.
struct HookBucket {
  size_t numel = 0;
  std::vector<HookTensor> tensors;
};

/// The hook view of the reducer's buckets: tensors in each bucket's order (Bucket::params),
/// offsets relative to the bucket. Throws std::logic_error if a tensor lies outside its bucket.
std::vector<HookBucket> hook_buckets(const ParamLayout& layout, const std::vector<Bucket>& buckets);

// ---------------------------------------------------------------- 16-bit casts (host)

/// IEEE binary16 bits of `x`, round to nearest even (overflow -> inf), as CUDA's __float2half_rn.
uint16_t float_to_fp16(float x);
/// The float value of binary16 bits (exact).
float fp16_to_float(uint16_t h);
/// bfloat16 bits of `x`, round to nearest even (NaN stays NaN), as CUDA's __float2bfloat16_rn.
uint16_t float_to_bf16(float x);
/// The float value of bfloat16 bits (exact).
float bf16_to_float(uint16_t h);

/// The compression step of fp16_compress_hook / bf16_compress_hook on the host:
/// out[i] = 16-bit(x[i] / world_size), the division done in fp32 *before* the single rounding to
/// 16 bits (so two ranks holding 40000 send 20000 each and fp16 does not overflow; PyTorch casts
/// first and divides in 16 bits, which only differs where the cast overflows or rounds twice).
/// `c` must be Fp16 or Bf16 (else std::invalid_argument).
void cast_to_16bit_host(Compression c, const float* x, size_t n, int world_size, uint16_t* out);
/// The decompression step: x[i] = float(h[i]). `c` must be Fp16 or Bf16.
void cast_from_16bit_host(Compression c, const uint16_t* h, size_t n, float* x);

/// User-defined MPI reduction ops that sum 16-bit floats the way NCCL does per reduction step:
/// each pair is added in fp32 and the sum rounded back to 16 bits. Use with MPI_UINT16_T buffers.
/// Created with MPI_Op_create in the constructor, freed in the destructor (not after MPI_Finalize).
/// Throws std::runtime_error on MPI failure.
class Mpi16BitSumOps {
 public:
  Mpi16BitSumOps();
  ~Mpi16BitSumOps();
  Mpi16BitSumOps(const Mpi16BitSumOps&) = delete;
  Mpi16BitSumOps& operator=(const Mpi16BitSumOps&) = delete;
  /// The op for `c` (Fp16 or Bf16; else std::invalid_argument).
  MPI_Op op(Compression c) const;

 private:
  MPI_Op fp16_ = MPI_OP_NULL, bf16_ = MPI_OP_NULL;
};

/// The text of the start-up warning for a run whose PowerSGD start step is never reached
/// (start_iter >= total_steps, the number of optimizer steps of the run: every bucket would be
/// all-reduced uncompressed). Empty when the warning does not apply (compression is not
/// PowerSGD, or the start step is reached). Rank 0 prints it.
std::string powersgd_never_compresses_warning(const ReducerOptions& o, int64_t total_steps);

}  // namespace vitddp
