// The gradient reducer: the whole story of a gradient from "ready" to "averaged".
#pragma once
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "mpi/bucket_timeline.h"
#include "mpi/buckets.h"
#include "mpi/ce_allreduce.h"
#include "mpi/comm_hooks.h"
#include "mpi/powersgd.h"
#include "mpi/powersgd_nccl.h"

namespace vitddp {

/// Per-step record of every bucket's communication, one entry per bucket (index = bucket index).
/// Times are milliseconds; start/end are relative to the step's start (GPU: the step-start CUDA
/// event on the compute stream; CPU: the host clock at step start).
struct BucketTimes {
  /// First / last event of the bucket's communication work (hook + all-reduce calls; the bucket
  /// copies of grad_as_bucket_view=false are not included, see copy_ms).
  std::vector<double> start_ms, end_ms;
  /// Payload bytes of this rank's all-reduce calls for the bucket, summed over the calls (not
  /// link traffic): fp32 numel*4; fp16/bf16 numel*2; PowerSGD (uncompressed + P + Q) floats x 4.
  std::vector<uint64_t> bytes_sent;
  /// 1 when the payload was compressed: fp16/bf16 always; PowerSGD from its start step on, when
  /// at least one tensor of the bucket is low-rank approximated. 0 otherwise.
  std::vector<uint8_t> compressed;
  /// Compression + decompression work (GPU: CUDA events around the cast / PowerSGD kernels on the
  /// comm stream, summed; CPU: host time). Copy-engine fp16/bf16: the peers' chunks' casts only;
  /// the own chunk's casts are fused into the sum and count in allreduce_ms.
  std::vector<double> compress_ms;
  /// Inside the all-reduce calls (GPU: CUDA events around the NCCL calls, summed; CPU: from
  /// MPI_Iallreduce to the return of its MPI_Wait, or the blocking calls of PowerSGD).
  std::vector<double> allreduce_ms;
  /// grad_as_bucket_view=false only (else 0): gradients -> bucket buffer before the all-reduce
  /// plus bucket buffer -> gradients in finalize() (GPU: device-to-device copies on the compute stream).
  std::vector<double> copy_ms;

  /// Sizes every vector to `buckets` entries of zero.
  void resize(size_t buckets);
};

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

/// The CPU backend's reducer: same buckets, launch order and hooks, gradients in host memory.
///  - none (and PowerSGD before its start step): each complete bucket is divided by world_size
///    and summed with MPI_Iallreduce(MPI_SUM) in place (DDP divides before the sum);
///  - fp16/bf16: cast (divided) into the bucket's 16-bit buffer, MPI_Iallreduce with a
///    user-defined op that adds pairs in fp32 and rounds back to 16 bits (what NCCL does per
///    reduction step), cast back in finalize();
///  - powersgd: PowerSgdHost with blocking MPI_Allreduce calls, run when the bucket launches.
/// finalize() waits for all requests in bucket order, copies the bucket buffer back
/// (grad_as_bucket_view=false) and counts the step for PowerSGD.
class MpiReducer {
 public:
  /// `grads`: layout.total host floats. Throws std::runtime_error on MPI failure,
  /// std::invalid_argument for bad PowerSGD options or a bucket of more than INT_MAX elements.
  MpiReducer(const ParamLayout& layout, std::vector<Bucket> buckets, float* grads, int world_size,
             const ReducerOptions& options = ReducerOptions());
  void prepare_for_backward(std::chrono::steady_clock::time_point step_start);
  void mark_ready(const std::vector<size_t>& params);
  void finalize();
  BucketTimes times() const { return times_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  const ReducerOptions& options() const { return opts_; }
  /// The PowerSGD hook (null unless compression == PowerSgd), for its iteration counter and state.
  const PowerSgdHost* powersgd() const { return powersgd_.get(); }

 private:
  struct Pending {
    size_t bucket;
    MPI_Request request;
    double issued_ms;
  };
  void launch(size_t bucket);
  double now_ms() const;
  float* bucket_data(size_t b);

  std::vector<Bucket> buckets_;
  BucketTracker tracker_;
  float* grads_;
  int world_size_;
  ReducerOptions opts_;
  std::vector<float> bucket_buf_;               ///< grad_as_bucket_view=false
  std::vector<std::vector<uint16_t>> half_;     ///< fp16/bf16: per bucket (requests overlap)
  std::unique_ptr<Mpi16BitSumOps> half_ops_;
  std::unique_ptr<PowerSgdHost> powersgd_;
  std::vector<Pending> pending_;
  std::chrono::steady_clock::time_point step_start_;
  BucketTimes times_;
};

}  // namespace vitddp
