// All-reduce between the GPUs of one node by their copy engines: no NCCL kernel holding SMs
// while backward's GEMMs run (results/h200x2/overlap: 8 held SMs cost
// bf16 backward 21-42%, 2.4 GB of copy-engine traffic 0.6 ms).
#pragma once
#include <cuda_runtime.h>
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cuda/kernels/ce_reduce.h"
#include "cuda/model/device_buffer.h"
#include "model/dtype.h"

namespace vitddp {

/// Reduce-scatter + all-gather of a bucket between the `n` ranks of `comm`, all on one node,
/// through CUDA IPC mappings of each other's buffers. Different buckets may run at once on
/// different streams (their flags and scratch are their own); concurrent all_reduce_16bit calls
/// need distinct staging buffers, and a bucket must use the same staging region on every rank:
///  1. reduce-scatter: the bucket is cut into n chunks; rank r copies chunk j into rank j's
///     scratch slot for r (cudaMemcpyAsync peer-to-peer: a copy engine over NVLink, no SM), then
///     raises rank j's flag (a 4-byte copy after the data, in stream order);
///  2. rank r waits for its n-1 flags (cuStreamWaitValue32: the stream's front end waits, no SM),
///     clears them, and sums its chunk with the n-1 copies (ce_sum_chunk: short blocks), times `scale`
///     (all_reduce_16bit: ce_sum_chunk_16bit, which also casts the own chunk to 16 bits and back);
///  3. all-gather: rank r copies its summed chunk into the same place in every peer's buffer and
///     raises their flags; it waits for the n-1 chunks of its peers.
/// The sum kernel also flags NaN/Inf (begin_step / exchange_nonfinite / nonfinite_slots).
/// The bytes each GPU sends equal a ring all-reduce's (2 (n-1)/n of the bucket). Every chunk is
/// summed on one rank only, so all ranks end with bit-identical results. Everything is enqueued
/// on the caller's stream and may be captured in a CUDA graph (copies, memory waits and writes
/// become graph nodes). Each flag is raised once per bucket and step and cleared by its waiter
/// before the waiter's own chunk goes out, so replays never see a stale flag.
///
/// Requirements: every rank of `comm` on this node, with its GPU able to map its peers' memory
/// (cudaIpcOpenMemHandle), and the same `buffers` sizes and bucket list on every rank.
class CopyEngineAllReduce {
 public:
  /// A device region that all_reduce() may be given data in: (pointer, bytes). Pointers may lie
  /// inside a larger cudaMalloc allocation (the IPC mapping covers the allocation).
  using Region = std::pair<void*, size_t>;
  /// `bucket_bytes[b]`: the largest payload all_reduce() will move for bucket b. Allocates the
  /// scratch ((n-1)/n of the bucket bytes, per bucket, plus 512 bytes of slack per slot) and the
  /// flags, maps every peer's regions, scratch and flags, and ends with a device synchronisation
  /// and an MPI_Barrier (no flag is raised before every rank has cleared its own). Collective
  /// over `comm`; every rank fails together when one cannot map its peers. Throws
  /// std::runtime_error: naming --allreduce copy-engine and the reason when a peer's memory
  /// cannot be mapped, a rank's buffer sizes or alignments differ, or the driver lacks a stream
  /// memory operation (cudaGetDriverEntryPointByVersion, CUDA 12.5 or later); the CUDA error
  /// for a failed allocation or cudaIpcGetMemHandle.
  CopyEngineAllReduce(MPI_Comm comm, const std::vector<Region>& buffers, const std::vector<size_t>& bucket_bytes);
  ~CopyEngineAllReduce();
  CopyEngineAllReduce(const CopyEngineAllReduce&) = delete;
  CopyEngineAllReduce& operator=(const CopyEngineAllReduce&) = delete;

  /// In place: data[i] = scale * sum over ranks of data[i], for `count` elements of `t` at `data`
  /// (inside one registered region, at the same offset on every rank), as bucket `bucket`.
  /// Enqueues on `stream` only; the result is complete when the stream reaches the end of it.
  /// A rank that never arrives leaves its peers' streams waiting: only the run's --step-timeout
  /// watchdog ends that (no NCCL error to poll). Throws, before enqueuing anything,
  /// std::invalid_argument when `data` is not aligned to its element size, does not lie within
  /// one registered region, or count x element size exceeds bucket_bytes[bucket]; throws
  /// std::runtime_error when a stream memory operation fails.
  void all_reduce(size_t bucket, void* data, size_t count, DType t, float scale, cudaStream_t stream);
  /// The fp16/bf16 compression hooks' all-reduce (PyTorch fp16_compress_hook / bf16_compress_hook)
  /// of the fp32 bucket `x` (`count` elements), in place, with its casts fused: the result is
  /// bit-identical to cast_to_16bit(x, divisor) into `staging`, all_reduce() of the 16-bit staging
  /// with scale 1, and cast_from_16bit back into x, but only the peers' chunks are cast to 16 bits
  /// and back; this rank's chunk is cast, summed and decompressed in one pass
  /// (ce_sum_chunk_16bit). For 2 ranks that saves 3 of the 19 bytes per element of HBM traffic
  /// (the kernels' share from 15 to 12). `staging`: `count` 16-bit elements (`t`: F16 or BF16),
  /// the payload, overwritten; inside one registered region, at the same offset on every rank.
  /// `x`: count fp32, 4-byte aligned, count x 4 at most bucket_bytes[bucket]; peers never access
  /// it, so it need not be registered. Enqueues on `stream` only. `mark` (optional) is called
  /// twice, to enqueue timing events: after the casts to 16 bits and before the casts back (so
  /// compression and all-reduce can be timed apart). Throws std::invalid_argument (before
  /// enqueuing anything) for a bad staging buffer as all_reduce() does for its data, an oversized
  /// or misaligned x, or t == F32; std::runtime_error when a stream memory operation fails.
  void all_reduce_16bit(size_t bucket, float* x, uint16_t* staging, size_t count, DType t, float divisor,
                        cudaStream_t stream, const std::function<void()>& mark = {});
  int world_size() const { return n_; }

  /// Non-finite check folded into the reduction. Each rank's sum kernels set its own slot when a
  /// summed element is NaN/Inf. begin_step() clears it; call it on a stream that every stream of
  /// the step's all-reduces is ordered after. exchange_nonfinite() copies it into every peer's
  /// slot for this rank and waits for theirs; call it on a stream that has joined every stream
  /// that ran one of the step's all-reduces. After that, nonfinite_slots()
  /// (n device ints, one per rank) says whether any element of the averaged buffers is non-finite.
  /// The result is the same on every rank. Enqueue only; std::runtime_error on a failed stream
  /// memory operation.
  void begin_step(cudaStream_t stream);
  void exchange_nonfinite(cudaStream_t stream);
  int32_t* nonfinite_slots() const;
  /// Device bytes allocated here (scratch and flags).
  size_t device_bytes() const { return scratch_.size() + flags_.size() * sizeof(int32_t); }
  /// What device_bytes() will be for these buckets and world size, without any CUDA call.
  static size_t planned_device_bytes(const std::vector<size_t>& bucket_bytes, int world_size);

 private:
  /// Chunk capacity in bytes of a bucket of `bytes` over `n` ranks (the scratch slot size).
  static size_t slot_bytes(size_t bytes, int n);
  /// Flags: [phase 0..2][bucket][sender] (phase 2 uses bucket 0: the non-finite exchange), then
  /// the n non-finite slots.
  static size_t flag_count(size_t buckets, int n);
  /// How a payload of `count` elements is cut: chunk j is [begin(j), begin(j) + length(j)), `size`
  /// elements (a multiple of 64, so copies stay aligned) except the last ones.
  struct Chunks {
    size_t count, size;
    size_t begin(int j) const;
    size_t length(int j) const;
  };
  Chunks chunks(size_t count) const;
  /// std::invalid_argument unless `bytes` of elements of `es` bytes at `data` fit bucket `bucket`,
  /// aligned, and (when `registered`) lie in one registered region.
  void check_payload(size_t bucket, const void* data, size_t bytes, size_t es, bool registered = true) const;
  /// Reduce-scatter: chunk j of `payload` into rank j's scratch slot for this rank, flags raised;
  /// then waits until every peer's copy of this rank's chunk has arrived.
  void scatter(size_t bucket, const uint8_t* payload, const Chunks& c, size_t es, cudaStream_t s);
  /// Where scatter() put the peers' copies of this rank's chunk `mine` (slot k at k x slot bytes).
  const uint8_t* received(size_t bucket, const void* mine) const;
  /// All-gather: `bytes` at `mine` into the same place in every peer's buffer, flags raised; then
  /// waits for every peer's chunk.
  void gather(size_t bucket, const uint8_t* mine, size_t bytes, cudaStream_t s);
  /// Index of the registered region holding `local`; std::invalid_argument when none does.
  size_t region_of(const void* local) const;
  void* peer_address(int peer, const void* local) const;
  void raise_flag(int peer, int phase, size_t bucket, cudaStream_t s);
  void wait_flags(int phase, size_t bucket, cudaStream_t s);

  int rank_ = 0, n_ = 1;
  size_t buckets_ = 0;
  std::vector<Region> regions_;
  std::vector<size_t> scratch_offset_, bucket_bytes_, slot_bytes_;  ///< per bucket
  DeviceBuffer<uint8_t> scratch_;
  DeviceBuffer<int32_t> flags_;  ///< see flag_count()
  DeviceBuffer<int32_t> one_;    ///< the value 1, source of every flag copy
  /// Per peer: region i, scratch and flags as mapped in this process (null for this rank).
  std::vector<std::vector<void*>> peer_regions_;
  std::vector<uint8_t*> peer_scratch_;
  std::vector<int32_t*> peer_flags_;
  std::vector<void*> opened_;  ///< every cudaIpcOpenMemHandle result, closed in the destructor
  unsigned wait_flags_ = 0;    ///< CU_STREAM_WAIT_VALUE_EQ, plus FLUSH where the device has it
  void* wait_fn_ = nullptr;    ///< cuStreamWaitValue32 (driver entry point)
  void* write_fn_ = nullptr;   ///< cuStreamWriteValue32
};

}  // namespace vitddp
