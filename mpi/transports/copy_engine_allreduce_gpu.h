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
/// ZeRO-1 (--shard-optimizer) uses the two halves apart, with the shard plan's chunks instead
/// (mpi/buckets/shard_plan.h: c = shard_chunk(count, n), rank r owns [r c, min(count, (r + 1) c)),
/// so the results lie where the NCCL transport puts them): reduce_scatter() is step 1 and 2 for
/// this rank's chunk only; all_gather() sends this rank's chunk into every peer's scratch slot for
/// it and copies the peers' chunks from its own scratch into place (the data need not be a
/// registered region: the parameters and their bf16 copy are not). As nothing of the other half
/// follows, each rank also tells its peers when it has read their copies out of its scratch (a
/// "free" flag per bucket and sender, raised once per reduce_scatter() and all_gather() after the
/// read and waited for and cleared by the sender before its next copy into that scratch; raised
/// at construction; the destructor waits for the last ones, at most 2 s). max_over_ranks() exchanges one int the same way, with slots and flags of its
/// own. A bucket goes through either all_reduce()/all_reduce_16bit() or the ZeRO-1 pair, not both
/// (all_reduce() does not wait for the free flags).
///
/// A peer on the same GPU is a peer like any other (two processes on one device: CUDA IPC needs
/// no peer access there; the copies are device-local), which lets the transport be tested on one GPU.
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

  // ---- ZeRO-1 (--shard-optimizer): chunk c = shard_chunk(count, n) per rank (mpi/buckets/shard_plan.h).
  /// In place, as bucket `bucket`: this rank's chunk of the `count` fp32 elements at `data`
  /// (elements [r c, min(count, (r + 1) c)), possibly short or empty) becomes scale times the sum
  /// over the ranks of that chunk (fp32, this rank's value first, then the peers' in rank order,
  /// one multiplication by `scale` at the end: ce_sum_chunk). The other chunks of `data` are left
  /// as they were (the GpuTransport contract calls them undefined). `data` lies in one registered
  /// region, at the same offset on every rank (the sum kernel's 16-byte accesses need the peers'
  /// copies at the chunk's address modulo 16). No non-finite check: with --shard-optimizer the
  /// engine checks its own chunks and agrees by max_over_ranks(). Enqueues on `stream` only.
  /// Throws, before enqueuing anything, std::invalid_argument when t is not F32 or `data` fails
  /// all_reduce()'s checks; std::runtime_error when a stream memory operation fails.
  void reduce_scatter(size_t bucket, void* data, size_t count, DType t, float scale, cudaStream_t stream);
  /// In place, as bucket `bucket`: every rank's chunk of the `count` elements of `t` (F32, BF16 or
  /// F16; moved as bytes) at `data` lands in the same place on every rank, bit for bit; this
  /// rank's chunk is only read, nothing outside the `count` elements is written. `data`: aligned
  /// to its element size, count x element size at most bucket_bytes[bucket]; any device memory
  /// (peers never access it). Enqueues on `stream` only. Throws std::invalid_argument (before
  /// enqueuing anything) for a bad payload; std::runtime_error when a stream memory operation fails.
  void all_gather(size_t bucket, void* data, size_t count, DType t, cudaStream_t stream);
  /// In place: the device int *d_value becomes its maximum over the ranks, the same on every rank
  /// (each rank copies it into every rank's max slot for it, then ce_max_slots). Not concurrent
  /// with itself. Enqueues on `stream` only; std::runtime_error when a stream memory operation fails.
  void max_over_ranks(int32_t* d_value, cudaStream_t stream);

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
  /// Flags in groups of n (one per sender), then value slots:
  ///   groups [phase][bucket] for phase 0 (scattered copy arrived), 1 (gathered chunk arrived),
  ///   2 (ZeRO-1: the sender's slot in that rank's scratch is free again); group 3 B: the
  ///   non-finite exchange; 3 B + 1: max_over_ranks' value arrived; 3 B + 2: its slot free again;
  ///   then the n non-finite slots and the n max slots (B buckets).
  static size_t flag_count(size_t buckets, int n);
  enum Phase : int { Scattered = 0, Gathered = 1, Free = 2 };
  size_t group(int phase, size_t bucket) const { return phase * buckets_ + bucket; }
  size_t nonfinite_group() const { return 3 * buckets_; }
  size_t max_group() const { return 3 * buckets_ + 1; }
  size_t max_free_group() const { return 3 * buckets_ + 2; }
  int32_t* max_slots() const;
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
  /// Before the memory goes: waits until every free flag is up again (the peers' last ZeRO-1
  /// reads done), polling the flags from the host for at most 2 s. Only reads; never throws.
  void await_free_flags() const noexcept;
  /// Index of the registered region holding `local`; std::invalid_argument when none does.
  size_t region_of(const void* local) const;
  void* peer_address(int peer, const void* local) const;
  /// Raises this rank's flag in group `g` of `peer`; waits for (and clears) every peer's flag in
  /// group `g` of this rank; raises this rank's flag in group `g` of every peer.
  void raise_flag(int peer, size_t g, cudaStream_t s);
  void wait_flags(size_t g, cudaStream_t s);
  void raise_flags(size_t g, cudaStream_t s);
  /// Rank `sender`'s scratch slot of bucket `bucket` in `receiver`'s scratch (its byte offset there).
  size_t slot_offset(size_t bucket, int sender, int receiver) const;

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
