// What one step's communication of each bucket cost (CUDA-free): the per-bucket columns of the
// results file (docs/schema.md, buckets/*), filled by GpuReducer and CpuReducer.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace vitddp {

/// What one bucket's gradient communication did in one step.
struct BucketCommReport {
  uint64_t bytes_sent = 0;   ///< sum over this rank's all-reduce (or reduce-scatter) calls of their payload bytes
  bool compressed = false;   ///< the payload was compressed (see BucketTimes::compressed)
  double compress_ms = 0;    ///< compression + decompression work
  double allreduce_ms = 0;   ///< inside the all-reduce (or reduce-scatter) calls
};

/// Per-step record of every bucket's communication, one entry per bucket (index = bucket index).
/// Times are milliseconds; start/end are relative to the step's start (GPU: the step-start CUDA
/// event on the compute stream; CPU: the host clock at step start). The gradient collective is an
/// all-reduce, or with --shard-optimizer (ZeRO-1) a reduce-scatter (`reduce_scattered`), whose
/// interval and bytes the all-reduce fields then hold; the parameters' all-gather after the
/// shard's update has its own fields.
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
  /// Inside the all-reduce calls (GPU: CUDA events around the NCCL / copy-engine calls, summed;
  /// CPU: from MPI_Iallreduce to the return of its MPI_Wait, or the blocking calls of PowerSGD).
  std::vector<double> allreduce_ms;
  /// grad_as_bucket_view=false only (else 0): gradients -> bucket buffer before the all-reduce
  /// plus bucket buffer -> gradients in finalize() (GPU: device-to-device copies on the compute stream).
  std::vector<double> copy_ms;
  /// 1 when the bucket's gradients were reduce-scattered (--shard-optimizer), 0 for an all-reduce.
  std::vector<uint8_t> reduce_scattered;
  /// --shard-optimizer: an all-gather of the bucket's updated parameters, start and end from the
  /// step's start, and its payload bytes (the whole bucket's fp32 bytes, nccl-tests' all-gather
  /// size). CPU: this step's (from MPI_Iallgatherv to the return of its MPI_Wait; 0 for a skipped
  /// step). GPU: the previous step's, which this step's forward waited for (CUDA events around the
  /// call on the comm stream; the start is negative when it began before this step; 0 in the first
  /// step). 0 without sharding.
  std::vector<double> allgather_start_ms, allgather_end_ms, allgather_ms;
  std::vector<uint64_t> allgather_bytes;

  /// Sizes every vector to `buckets` entries of zero.
  void resize(size_t buckets);
};

}  // namespace vitddp
