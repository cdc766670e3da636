// Transports of the GPU backend: who moves a bucket between the GPUs, enqueued on a comm stream
// (nccl-tests' per-collective view: one all-reduce of `count` elements of a dtype; with
// --shard-optimizer a reduce-scatter and an all-gather). Registered by --allreduce value in
// mpi/transports/gpu_registry_gpu.cpp.
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/dtype.h"
#include "mpi/hooks/comm_hook.h"
#include "mpi/reducer/reducer_options.h"

namespace vitddp {

/// An all-reduce implementation for device buffers. Everything is enqueued on the stream given
/// (no host synchronisation, capturable in a CUDA graph).
class GpuTransport {
 public:
  virtual ~GpuTransport() = default;
  /// The registry name (--allreduce value).
  virtual const char* name() const = 0;
  /// In place over all ranks, as bucket `bucket`'s payload: `count` elements of `t` at `data`
  /// become their sum or average (ReduceOp). Enqueued on `stream`.
  virtual void all_reduce(size_t bucket, void* data, size_t count, DType t, ReduceOp op, cudaStream_t stream) = 0;
  /// True when all_reduce_16bit() is available.
  virtual bool fuses_16bit_casts() const { return false; }
  /// The fp16/bf16 hooks' exchange with their casts fused (GradBucket::all_reduce_16bit_fused):
  /// x (count fp32) ends as the 16-bit average, bit-identical to cast_to_16bit(x, divisor) into
  /// `staging`, all_reduce(Sum) of it, cast back. `mark` enqueues a timing event; it is called
  /// twice, after the casts to 16 bits and before the casts back. Throws std::logic_error
  /// unless fuses_16bit_casts().
  virtual void all_reduce_16bit(size_t bucket, float* x, uint16_t* staging, size_t count, DType t, float divisor,
                                cudaStream_t stream, const std::function<void()>& mark);
  /// Before the step's first bucket, on the compute stream (every comm stream is ordered after it).
  virtual void begin_step(cudaStream_t compute) { (void)compute; }
  /// After the step's last bucket, on the first comm stream once it joined the others.
  virtual void end_step(cudaStream_t comm) { (void)comm; }
  /// True when the reduction itself checks the averaged gradients for NaN/Inf (flag_nonfinite).
  virtual bool checks_nonfinite() const { return false; }
  /// Sets *d_flag = 1 (device int) when any averaged gradient of the finished step is NaN/Inf,
  /// the same on every rank; enqueued on `stream`. Throws std::logic_error unless checks_nonfinite().
  virtual void flag_nonfinite(int* d_flag, cudaStream_t stream) const;
  /// True when the buckets move by the copy engines (the engine's transport description).
  virtual bool uses_copy_engines() const { return false; }

  // ---- ZeRO-1 (--shard-optimizer); the defaults throw std::logic_error naming the transport
  /// True when reduce_scatter(), all_gather() and max_over_ranks() are available.
  virtual bool shards() const { return false; }
  /// ZeRO-1's exchange of bucket `bucket`, in place: the `count` elements of `t` at `data` summed
  /// or averaged over the ranks, of which this rank's chunk (mpi/buckets/shard_plan.h: with
  /// c = shard_chunk(count, N), elements [r c, min(count, (r + 1) c))) is written back where it
  /// lies; the other ranks' chunks of `data` are left undefined. Enqueued on `stream`.
  virtual void reduce_scatter(size_t bucket, void* data, size_t count, DType t, ReduceOp op, cudaStream_t stream);
  /// ZeRO-1's all-gather of bucket `bucket`, in place: every rank's chunk of the `count` elements of
  /// `t` at `data` (elements [r c, min(count, (r + 1) c)) of rank r) lands in the same place on
  /// every rank; nothing is written outside the `count` elements. Enqueued on `stream`.
  virtual void all_gather(size_t bucket, void* data, size_t count, DType t, cudaStream_t stream);
  /// ZeRO-1's agreement on a skipped step: the device int *d_value becomes its maximum over the
  /// ranks (in place). Enqueued on `stream`.
  virtual void max_over_ranks(int* d_value, cudaStream_t stream);
  /// Device bytes this transport allocated.
  virtual size_t device_bytes() const { return 0; }
};

/// What a GPU transport will need, known before it is built (for the reducer's allocations and
/// the memory estimate, without any CUDA call).
struct GpuTransportPlan {
  int comm_streams = 1;           ///< comm streams the buckets alternate over (bucket b on b mod N)
  size_t device_bytes = 0;        ///< what device_bytes() will report
  /// True when all_reduce() reaches only the buffers registered at construction (the reducer's
  /// gradient, bucket and staging buffers): a hook that reduces its own buffers is refused.
  bool registered_buffers_only = false;
  /// True when the transport has ZeRO-1's collectives (GpuTransport::shards()); the reducer refuses
  /// options.shard_optimizer otherwise.
  bool shards = false;
};

/// What a GPU transport factory gets.
struct GpuTransportArgs {
  ncclComm_t comm;                ///< this rank's NCCL communicator
  int world_size;
  const ReducerOptions& options;
  /// Device regions all_reduce() may be given data in: (pointer, bytes).
  std::vector<std::pair<void*, size_t>> regions;
  std::vector<size_t> bucket_bytes;  ///< per bucket: its fp32 bytes (the largest payload)
};

/// A registry entry: the --allreduce value, its plan and its factory.
struct GpuTransportEntry {
  const char* name;
  GpuTransportPlan (*plan)(const ReducerOptions& options, int world_size, const std::vector<size_t>& bucket_bytes);
  std::unique_ptr<GpuTransport> (*make)(const GpuTransportArgs& args);
};

/// The registered GPU transports, in --help order: nccl, copy-engine.
const std::vector<GpuTransportEntry>& gpu_transport_registry();
/// The entry registered as `name`. Throws std::invalid_argument "unknown all-reduce transport
/// 'x' (choose one of: nccl, copy-engine)" for any other name.
const GpuTransportEntry& gpu_transport(const std::string& name);

/// Whether a GPU reducer with these options on `world_size` ranks all-reduces by the copy engines:
/// --allreduce copy-engine and more than one rank (one rank has nothing to move; its reducer
/// allocates no copy-engine scratch and uses NCCL).
bool uses_copy_engine(const ReducerOptions& options, int world_size);

}  // namespace vitddp
