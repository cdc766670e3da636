// What a reducer is asked to do (CUDA-free): DDP's options, the comm hook and the transport by
// name (the registry keys of mpi/hooks/comm_hook.h and mpi/transports/), PowerSGD's
// hyper-parameters, and the hook view of the buckets.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/param_layout.h"
#include "mpi/buckets/buckets.h"

namespace vitddp {

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

/// Everything a reducer (GpuReducer, CpuReducer) needs besides buffers and communicator.
/// Default-constructed: DDP's defaults (overlap, gradient_as_bucket_view=True, no compression).
struct ReducerOptions {
  bool overlap = true;              ///< false (--no-overlap): every bucket starts after backward
  /// true (PyTorch gradient_as_bucket_view=True): the gradients are the bucket, reduced in place.
  /// false: a separate flat bucket buffer; a ready bucket's gradients are copied into it
  /// (device-to-device for the GPU), it is all-reduced, and copied back into the gradients in
  /// finalize(), before the optimizer (PyTorch's default gradient_as_bucket_view=False).
  bool grad_as_bucket_view = true;
  /// The comm hook, by its registry name (--compression): "none" (allreduce_hook), "fp16"
  /// (fp16_compress_hook), "bf16" (bf16_compress_hook), "powersgd" (powerSGD_hook); see
  /// compression_names() in mpi/hooks/comm_hook.h. A reducer refuses an unknown name.
  std::string compression = "none";
  PowerSgdOptions powersgd;         ///< used when compression == "powersgd"
  /// GPU backend: the transport that moves the buckets, by its registry name (--allreduce):
  /// "nccl" (ncclAllReduce, SM-driven kernels) or "copy-engine" (peer-to-peer copies by the copy
  /// engines plus a short sum kernel, for ranks on one node; not with PowerSGD). See
  /// mpi/transports/gpu_transport_gpu.h. The CPU backend always uses "mpi".
  std::string allreduce = "nccl";
  /// The comm streams the buckets of a step alternate over (bucket b on stream b mod
  /// comm_streams), each with its own 16-bit staging buffer when compressing to fp16/bf16, so
  /// one bucket's sum and all-gather overlap the next one's reduce-scatter. 1 to 4, checked by
  /// GpuReducer always; used only by the copy-engine transport on more than one rank.
  int comm_streams = 1;
  /// --shard-optimizer (ZeRO stage 1): each bucket is reduce-scattered (averaged) into this rank's
  /// shard of the gradients (mpi/buckets/shard_plan.h) by the hook's sharded form instead of
  /// all-reduced; after the shard's update the reducer all-gathers the parameters. Only
  /// compression "none" has a sharded form; grad_as_bucket_view must be true.
  bool shard_optimizer = false;
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

/// The text of the start-up warning for a run whose PowerSGD start step is never reached
/// (start_iter >= total_steps, the number of optimizer steps of the run: every bucket would be
/// all-reduced uncompressed). Empty when the warning does not apply (compression is not
/// PowerSGD, or the start step is reached). Rank 0 prints it.
std::string powersgd_never_compresses_warning(const ReducerOptions& o, int64_t total_steps);

}  // namespace vitddp
