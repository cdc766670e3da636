// The GPU backend's gradient reducer (NCCL or the copy engines): the whole story of a gradient
// from "ready" to "averaged" on the device. The CPU backend's is mpi/reducer.h.
#pragma once
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "mpi/bucket_timeline_gpu.h"
#include "mpi/bucket_times.h"
#include "mpi/buckets.h"
#include "mpi/ce_allreduce_gpu.h"
#include "mpi/comm_hooks.h"
#include "mpi/powersgd.h"
#include "mpi/powersgd_nccl_gpu.h"

namespace vitddp {

/// Data-parallel gradient averaging over NCCL, overlapped with backward (PyTorch DDP semantics:
/// c10d::Reducer with a static graph and a comm hook chosen by ReducerOptions::compression).
///
/// Gradients live in one flat fp32 device buffer; each bucket is a contiguous slice of it. The
/// backward pass calls mark_ready() for each finished group of parameters right after enqueuing
/// its kernels on the compute stream. When a bucket becomes complete (and all earlier buckets are
/// launched), the reducer records an event on the compute stream, makes the comm stream wait for
/// it and enqueues the bucket's hook on the comm stream, between timing events:
///  - none: ncclAllReduce(ncclAvg) in place;
///  - fp16/bf16: cast (divided by the world size) into a 16-bit staging buffer, ncclAllReduce(SUM)
///    in ncclFloat16/ncclBfloat16, cast back into the bucket;
///  - powersgd: PowerSgdNccl (plain ncclAvg before its start step).
/// With ReducerOptions::allreduce == CopyEngine (and more than one rank) the all-reduce of
/// none and fp16/bf16 is CopyEngineAllReduce's instead of ncclAllReduce, on the bucket's comm
/// stream between the same timing events: none, its sum times 1/world size; fp16/bf16,
/// all_reduce_16bit, which fuses the own chunk's casts into the sum (same bits, fewer passes over
/// the bucket; the compression time then counts only the peers' chunks' casts). With
/// ReducerOptions::comm_streams = N > 1 the copy engine's buckets alternate over N comm streams
/// (bucket b on stream b mod N, each stream with its own 16-bit staging buffer), and
/// finalize() joins the streams that ran into the first before the non-finite exchange. The
/// copy engine's non-finite slot is cleared on the compute stream before the first bucket.
/// With grad_as_bucket_view=false the bucket is a slice of a separate flat buffer: the gradients
/// are copied into it (device-to-device, compute stream) before the ready event, and copied back
/// in finalize(). finalize() launches anything left (all buckets with overlap off), makes the
/// compute stream wait for the comm stream (and copies back), so the optimizer reads averaged
/// gradients; it also counts the step for PowerSGD.
class NcclReducer {
 public:
  /// `d_grads`: layout.total device floats. `comm`: this rank's NCCL communicator (its size is
  /// the world size). `compute`: the stream backward runs on. Allocates the comm streams (1, or
  /// comm_streams with the copy-engine all-reduce), events, and the buffers the options need
  /// (bucket buffer: layout.total floats; 16-bit staging: the largest bucket, one per comm stream;
  /// PowerSGD state: see PowerSgdNccl). Throws std::runtime_error on CUDA/NCCL failure,
  /// std::invalid_argument for bad PowerSGD options, PowerSGD with the copy-engine all-reduce, or
  /// comm_streams outside [1, 4]; a throw frees what was allocated.
  NcclReducer(const ParamLayout& layout, std::vector<Bucket> buckets, float* d_grads, ncclComm_t comm,
              cudaStream_t compute, const ReducerOptions& options = ReducerOptions());
  ~NcclReducer();
  NcclReducer(const NcclReducer&) = delete;
  NcclReducer& operator=(const NcclReducer&) = delete;

  void prepare_for_backward();
  void mark_ready(const std::vector<size_t>& params);
  void finalize();
  /// Reads the bucket events of the finished step relative to `step_start` (call after the step's
  /// work has completed).
  BucketTimes times(cudaEvent_t step_start) const;
  /// True with the copy-engine all-reduce (more than one rank): the reduction itself checked the
  /// averaged gradients for NaN/Inf, and flag_nonfinite() reports it without another pass.
  bool checks_nonfinite() const { return copy_engine_in_use(); }
  /// True when this reducer all-reduces by the copy engines (uses_copy_engine() of its options
  /// and world size).
  bool copy_engine_in_use() const { return ce_ != nullptr; }
  /// Sets *d_flag = 1 (device int) when any averaged gradient of the finished step is NaN/Inf,
  /// as flag_nonfinite() of cuda/sgd.h over the whole buffer would; the same on every rank.
  /// Enqueued on `stream`, which must follow finalize() (the compute stream does). Throws
  /// std::logic_error unless checks_nonfinite().
  void flag_nonfinite(int* d_flag, cudaStream_t stream) const;
  /// The event recorded on the (first) comm stream after the last all-reduce of the step, once
  /// every other comm stream that ran has joined it.
  cudaEvent_t comm_done() const { return comm_done_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  /// The first comm stream (the only one unless comm_streams > 1 with the copy engine).
  cudaStream_t comm_stream() const { return comm_streams_.at(0); }
  const ReducerOptions& options() const { return opts_; }
  /// The PowerSGD hook (null unless compression == PowerSgd), for its iteration counter and state.
  const PowerSgdNccl* powersgd() const { return powersgd_.get(); }
  /// Device bytes the reducer allocated (bucket buffer, 16-bit staging per comm stream, PowerSGD
  /// state, the copy-engine all-reduce's scratch and flags).
  size_t device_bytes() const;
  /// Device bytes a reducer built with these arguments allocates (what device_bytes() then
  /// reports), computed without any CUDA call, for the memory estimate: layout.total fp32 for the
  /// bucket buffer (--grad-as-bucket-view off), the largest bucket in 16 bit (fp16/bf16
  /// compression; with the copy-engine all-reduce one per comm stream), PowerSgdNccl::
  /// planned_device_bytes (PowerSGD), and with the copy-engine all-reduce on `world_size` > 1
  /// ranks CopyEngineAllReduce::planned_device_bytes.
  static size_t planned_device_bytes(const ParamLayout& layout, const std::vector<Bucket>& buckets,
                                     const ReducerOptions& options, int world_size);

 private:
  void launch(size_t bucket);
  /// The constructor's allocations (streams, events, buffers, the copy-engine all-reduce).
  void create(const ParamLayout& layout);
  /// Drains every stream, then frees what create() made; safe on a half-made reducer.
  void release();

  std::vector<Bucket> buckets_;
  BucketTracker tracker_;
  float* d_grads_;
  ncclComm_t comm_;
  cudaStream_t compute_;
  /// The comm streams: one, or comm_streams with the copy-engine all-reduce, where bucket b runs
  /// on stream b mod size() so one bucket's sum and all-gather overlap the next one's
  /// reduce-scatter. Stream 0 also runs NCCL, PowerSGD and the step's closing work (finalize).
  std::vector<cudaStream_t> comm_streams_;
  /// Per comm stream: recorded at its end of the step, for stream 0 to join it (entry 0 unused).
  std::vector<cudaEvent_t> comm_joined_;
  /// Per comm stream, fp16/bf16 compression only: its 16-bit staging buffer (buckets on one
  /// stream run in order, so they can share it).
  std::vector<DeviceBuffer<uint16_t>> half_;
  ReducerOptions opts_;
  int world_size_ = 1;
  std::vector<cudaEvent_t> ready_;
  std::vector<std::unique_ptr<BucketTimeline>> timeline_;  ///< per bucket, events on its comm stream
  std::vector<cudaEvent_t> copy_ev_;  ///< per bucket 4 events: copy in [0,1], copy back [2,3]
  cudaEvent_t comm_done_ = nullptr;
  DeviceBuffer<float> d_bucket_;      ///< grad_as_bucket_view=false: the flat bucket buffer
  std::unique_ptr<PowerSgdNccl> powersgd_;
  std::unique_ptr<CopyEngineAllReduce> ce_;  ///< --allreduce copy-engine with world size > 1
  bool step_started_ = false;                ///< a bucket of this step was launched
};

}  // namespace vitddp
