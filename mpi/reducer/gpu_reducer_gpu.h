// The GPU backend's reducer: the Reducer core (mpi/reducer/reducer.h) with gradients in device
// memory, the comm hook's work enqueued on comm streams and moved by a GPU transport.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "cuda/model/device_buffer.h"
#include "mpi/buckets/bucket_times.h"
#include "mpi/buckets/buckets.h"
#include "mpi/buckets/shard_plan.h"
#include "mpi/hooks/comm_hook.h"
#include "mpi/hooks/powersgd_gpu.h"
#include "mpi/reducer/reducer.h"
#include "mpi/reducer/reducer_options.h"
#include "mpi/transports/gpu_transport_gpu.h"

namespace vitddp {

/// Data-parallel gradient averaging on the GPU, overlapped with backward (PyTorch DDP semantics:
/// c10d::Reducer with a static graph and the comm hook named by ReducerOptions::compression, over
/// the transport named by ReducerOptions::allreduce).
///
/// Gradients live in one flat fp32 device buffer; each bucket is a contiguous slice of it. The
/// backward pass calls mark_ready() for each finished group of parameters right after enqueuing
/// its kernels on the compute stream. When a bucket becomes complete (and all earlier buckets are
/// launched), the reducer records an event on the compute stream, makes the bucket's comm stream
/// wait for it and runs the hook, which enqueues its work on that stream between timing events:
///  - none: the transport's average in place (NCCL: ncclAllReduce(ncclAvg); copy engine: its sum
///    times 1/world size);
///  - fp16/bf16: cast (divided by the world size) into a 16-bit staging buffer, all-reduce SUM in
///    fp16/bf16, cast back into the bucket; the copy engine fuses the own chunk's casts into its
///    sum (same bits, fewer passes over the bucket; the compression time then counts only the
///    peers' chunks' casts);
///  - powersgd: PowerSgdGpu (the plain average before its start step).
/// With the copy-engine transport (more than one rank) and ReducerOptions::comm_streams = N > 1
/// the buckets alternate over N comm streams (bucket b on stream b mod N, each stream with its
/// own 16-bit staging buffer), and finalize() joins the streams that ran into the first before
/// the non-finite exchange. The copy engine's non-finite slot is cleared on the compute stream
/// before the first bucket. With grad_as_bucket_view=false the bucket is a slice of a separate
/// flat buffer: the gradients are copied into it (device-to-device, compute stream) before the
/// ready event, and copied back in finalize(). finalize() launches anything left (all buckets
/// with overlap off), makes the compute stream wait for the comm stream (and copies back), so the
/// optimizer reads averaged gradients; it also counts the step for PowerSGD. Everything is
/// enqueued on streams (no host synchronisation inside a step): a step can be captured in a CUDA
/// graph (PowerSGD aside).
///
/// With ReducerOptions::shard_optimizer (--shard-optimizer, ZeRO-1; transports whose plan
/// shards: NCCL) the sharded hook reduce-scatters each bucket in place (ncclReduceScatter(ncclAvg);
/// through a scratch padded to N equal chunks when needed): this rank's chunk of the bucket
/// (shard_plan()) then holds the average, the others are undefined. After the optimizer,
/// all_gather() brings every rank's updated chunks back into the full parameters in place on the
/// comm stream, eagerly (outside the step's CUDA graph), recording an event per bucket that the
/// next forward waits for bucket by bucket; agree_nonfinite() makes the ranks agree on a skipped
/// step.
class GpuReducer : private ReducerBackend, private HookBackend {
 public:
  /// `d_grads`: layout.total device floats. `comm`: this rank's NCCL communicator (its size is
  /// the world size). `compute`: the stream backward runs on. Allocates the comm streams (the
  /// transport's plan: 1, or comm_streams with the copy engine), events, and the buffers the
  /// hook needs (bucket buffer: layout.total floats; 16-bit staging: the largest bucket, one per
  /// comm stream; PowerSGD state: see PowerSgdGpu). Throws std::runtime_error on CUDA/NCCL
  /// failure, std::invalid_argument for an unknown compression or transport, bad PowerSGD
  /// options, PowerSGD with the copy-engine all-reduce, or comm_streams outside [1, 4]; a throw
  /// frees what was allocated.
  GpuReducer(const ParamLayout& layout, std::vector<Bucket> buckets, float* d_grads, ncclComm_t comm,
             cudaStream_t compute, const ReducerOptions& options = ReducerOptions());
  ~GpuReducer() override;
  GpuReducer(const GpuReducer&) = delete;
  GpuReducer& operator=(const GpuReducer&) = delete;

  void prepare_for_backward();
  void mark_ready(const std::vector<size_t>& params) { core_.mark_ready(params); }
  void finalize() { core_.finalize(); }
  /// Reads the bucket events of the finished step's gradient collectives relative to `step_start`
  /// (call after the step's work has completed); the allgather_* fields stay 0 (gather_times).
  BucketTimes times(cudaEvent_t step_start) const;
  /// True with the copy-engine all-reduce (more than one rank): the reduction itself checked the
  /// averaged gradients for NaN/Inf, and flag_nonfinite() reports it without another pass.
  bool checks_nonfinite() const { return transport_ && transport_->checks_nonfinite(); }
  /// True when this reducer all-reduces by the copy engines (uses_copy_engine() of its options
  /// and world size).
  bool copy_engine_in_use() const { return transport_ && transport_->uses_copy_engines(); }
  /// Sets *d_flag = 1 (device int) when any averaged gradient of the finished step is NaN/Inf,
  /// as flag_nonfinite() of cuda/kernels/sgd.h over the whole buffer would; the same on every rank.
  /// Enqueued on `stream`, which must follow finalize() (the compute stream does). Throws
  /// std::logic_error unless checks_nonfinite().
  void flag_nonfinite(int* d_flag, cudaStream_t stream) const { transport_->flag_nonfinite(d_flag, stream); }
  /// The event recorded on the (first) comm stream after the last all-reduce of the step, once
  /// every other comm stream that ran has joined it.
  cudaEvent_t comm_done() const { return comm_done_; }
  const std::vector<Bucket>& buckets() const { return core_.buckets(); }
  /// The first comm stream (the only one unless comm_streams > 1 with the copy engine).
  cudaStream_t comm_stream() const { return comm_streams_.at(0); }
  const ReducerOptions& options() const { return opts_; }
  /// The PowerSGD state (null unless compression == "powersgd"), for its iteration counter and error.
  const PowerSgdGpu* powersgd() const { return powersgd_; }

  // ---- ZeRO-1 (--shard-optimizer); null / throwing std::logic_error without options.shard_optimizer
  /// This rank's shard of the buckets (its rank: the communicator's): once the compute stream
  /// passed finalize(), the averaged gradients of its slices (ShardSlice::flat_offset, count) in
  /// the gradient buffer.
  const ShardPlan* shard_plan() const { return shard_.get(); }
  /// ZeRO-1's agreement on a skipped step: the device int *d_flag (set on `stream` for this rank's
  /// loss and shard) becomes its maximum over the ranks: the comm stream waits for `stream`, runs a
  /// one-int ncclAllReduce(max) (GpuTransport::max_over_ranks), and `stream` waits for it.
  void agree_nonfinite(int* d_flag, cudaStream_t stream);
  /// After the shard's update, enqueued on `stream` (the compute stream): the comm stream waits for
  /// it, then per bucket, from the last to the first (the order a forward reads them), all-gathers
  /// every rank's chunk of `d_params` (layout.total fp32) in place between timing events (an NVTX
  /// range "all-gather bucket k" each), followed, when
  /// `d_bf16` is given, by the refresh of the bucket's part of the model's bf16 working copy
  /// (convert_to_bf16), then records gathered(set, b); after the last bucket, params_ready(set).
  /// Returns `set`, the event set this call recorded: the calls alternate between sets 0 and 1, so
  /// the events and timings of one call are recorded again only by the next-but-one call (a step's
  /// CUDA graph may wait on the previous step's set while this step records the other). That is
  /// safe because the engine waits on the host for each step's end (finish_step) before it
  /// enqueues the next-but-one step: a pipeline that enqueued step s+2 before step s+1 finished
  /// could re-record a set its own predecessor's graph still waits on. Nothing
  /// waits for the all-gathers:
  /// the caller makes its streams wait for gathered() or params_ready() before reading the
  /// parameters. Throws std::logic_error without sharding.
  int all_gather(float* d_params, __nv_bfloat16* d_bf16, cudaStream_t stream);
  /// The same with the parameters gathered in bf16 (--allgather-dtype bf16, half the bytes): on
  /// entry this rank's chunk of `d_bf16` (layout.total bf16, the model's working copy) holds the
  /// bf16 rounds of its updated fp32 masters; per bucket, from the last to the first, every rank's
  /// chunk of `d_bf16` is all-gathered in place (DType::BF16) between the timing events, then
  /// d_params[i] = float(d_bf16[i]) (exact) over the bucket's ranges fp32_read[b] (flat ranges of
  /// the parameters the bf16 model reads in fp32: bucket_ranges of bf16_model_fp32_params) before
  /// gathered(set, b) is recorded. The rest of `d_params` is not written. Events, sets and the
  /// caller's duties as all_gather(); gather_times() reports the bf16 bytes. Throws
  /// std::logic_error without sharding, std::invalid_argument unless fp32_read has one entry per
  /// bucket.
  int all_gather_bf16(__nv_bfloat16* d_bf16, float* d_params, const std::vector<std::vector<FlatRange>>& fp32_read,
                      cudaStream_t stream);
  /// Recorded on the comm stream after bucket b's all-gather (and bf16 refresh) of the all_gather()
  /// call that returned `set` (0 or 1).
  cudaEvent_t gathered(int set, size_t b) const { return gathered_.at(set).at(b); }
  /// Recorded on the comm stream after the whole all_gather() call that returned `set`.
  cudaEvent_t params_ready(int set) const { return params_ready_.at(set); }
  /// Fills the allgather_* fields of `t` (sized for the buckets) with the all-gathers of the
  /// all_gather() call that returned `set`, start and end relative to `from` (negative when they
  /// began before it). Every event involved must have completed (the caller waited for them).
  void gather_times(int set, cudaEvent_t from, BucketTimes* t) const;
  /// Device bytes the reducer allocated (bucket buffer, 16-bit staging per comm stream, the
  /// hook's state, the transport's scratch and flags).
  size_t device_bytes() const;
  /// Device bytes a reducer built with these arguments allocates (what device_bytes() then
  /// reports), computed without any CUDA call, for the memory estimate: layout.total fp32 for the
  /// bucket buffer (--grad-as-bucket-view off), the largest bucket in 16 bit per comm stream
  /// (fp16/bf16 compression), the hook's planned_device_bytes (PowerSgdGpu::planned_device_bytes)
  /// and the transport plan's device_bytes (CopyEngineAllReduce::planned_device_bytes on `world_size` > 1 ranks; the
  /// NCCL transport's padded bucket scratch with --shard-optimizer). Throws std::invalid_argument
  /// for an unknown compression or transport.
  static size_t planned_device_bytes(const ParamLayout& layout, const std::vector<Bucket>& buckets,
                                     const ReducerOptions& options, int world_size);

 private:
  class DeviceBucket;
  /// The GPU's HookBackend when only planning (planned_device_bytes).
  class Planner;
  GradBucket& start_bucket(size_t b) override;
  void finish_buckets() override;
  std::unique_ptr<PowerSgdState> make_powersgd(const std::vector<HookBucket>& buckets,
                                               const PowerSgdOptions& options) override;
  size_t planned_powersgd_bytes(const std::vector<HookBucket>& buckets, const PowerSgdOptions& options) const override;
  /// all_gather() and all_gather_bf16(): the comm stream waits for `stream`, then per bucket
  /// (last first) `collective` between the bucket's timing events, `after` (the conversions),
  /// then gathered(set, b); returns the set. `elem_bytes`: the gathered dtype's size (gather_times).
  using BucketWork = std::function<void(const Bucket&, cudaStream_t)>;
  int gather_buckets(cudaStream_t stream, size_t elem_bytes, const BucketWork& collective, const BucketWork& after);
  /// The constructor's allocations (streams, events, buffers, hook state, the transport).
  void create(const ParamLayout& layout);
  /// Drains every stream, then frees what create() made; safe on a half-made reducer.
  void release();

  Reducer core_;
  float* d_grads_;
  ncclComm_t comm_;
  cudaStream_t compute_;
  ReducerOptions opts_;
  int world_size_ = 1;
  std::vector<HookBucket> hook_buckets_;
  GpuTransportPlan plan_;
  std::unique_ptr<CommHook> hook_;
  /// The comm streams: bucket b runs on stream b mod size() (with the copy engine, one bucket's
  /// sum and all-gather overlap the next one's reduce-scatter). Stream 0 also runs PowerSGD and
  /// the step's closing work (finalize).
  std::vector<cudaStream_t> comm_streams_;
  /// Per comm stream: recorded at its end of the step, for stream 0 to join it (entry 0 unused).
  std::vector<cudaEvent_t> comm_joined_;
  /// Per comm stream, fp16/bf16 compression only: its 16-bit staging buffer (buckets on one
  /// stream run in order, so they can share it).
  std::vector<DeviceBuffer<uint16_t>> half_;
  std::vector<cudaEvent_t> ready_;
  std::vector<std::unique_ptr<DeviceBucket>> bucket_;  ///< per bucket: its GradBucket and timing events
  std::vector<cudaEvent_t> copy_ev_;  ///< per bucket 4 events: copy in [0,1], copy back [2,3]
  cudaEvent_t comm_done_ = nullptr;
  DeviceBuffer<float> d_bucket_;      ///< grad_as_bucket_view=false: the flat bucket buffer
  const PowerSgdGpu* powersgd_ = nullptr;
  std::unique_ptr<GpuTransport> transport_;
  bool step_started_ = false;         ///< a bucket of this step was launched
  // ZeRO-1 (--shard-optimizer); the all-gather's events in two sets (all_gather()'s `set`)
  std::unique_ptr<ShardPlan> shard_;
  std::array<std::vector<cudaEvent_t>, 2> gather_ev_;  ///< per bucket 2 timing events: all-gather start, end
  std::array<std::vector<cudaEvent_t>, 2> gathered_;   ///< per bucket: its parameters (and bf16 copy) in place
  std::array<cudaEvent_t, 2> params_ready_{};
  cudaEvent_t gather_go_ = nullptr, flag_go_ = nullptr, flag_done_ = nullptr;
  int gather_calls_ = 0;                   ///< all_gather() calls so far (the set is their parity)
  std::array<size_t, 2> gather_elem_bytes_{{4, 4}};  ///< per set: bytes per gathered element (fp32 4, bf16 2)
};

/// d_params[i] = float(d_bf16[i]) (exact) over each flat range of `ranges` (elements, offsets into
/// both layout.total buffers), enqueued on `stream`: what all_gather_bf16 does per bucket after its
/// all-gather, and what the engine does at start-up and after a restore.
void upcast_bf16_ranges(const __nv_bfloat16* d_bf16, float* d_params, const std::vector<FlatRange>& ranges,
                        cudaStream_t stream);

}  // namespace vitddp
