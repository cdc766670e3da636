#include "mpi/transports/copy_engine_allreduce_gpu.h"

#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "cuda/check/check_cuda.h"
#include "cuda/kernels/compression.h"
#include "mpi/buckets/shard_plan.h"
#include "mpi/world/world.h"

namespace vitddp {

namespace {

using WaitWriteFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
using AddressRangeFn = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
using AttributeFn = CUresult (*)(int*, CUdevice_attribute, CUdevice);

// A driver API function through the runtime (no link against libcuda, which CPU-only machines
// lack). Throws std::runtime_error when the driver does not have it.
void* driver_entry(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  CUDA_CHECK(cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q));
  if (q != cudaDriverEntryPointSuccess || !fn)
    throw std::runtime_error(std::string("--allreduce copy-engine: the CUDA driver has no ") + name);
  return fn;
}

void cu_check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS)
    throw std::runtime_error(std::string("--allreduce copy-engine: ") + what + " failed (CUresult " +
                             std::to_string(static_cast<int>(r)) + ")");
}

// What a rank publishes about one device region: the IPC handle of the allocation holding it and
// the region's offset inside that allocation.
struct Published {
  cudaIpcMemHandle_t handle;
  uint64_t offset;
  uint64_t bytes;
};

size_t round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

// Where a chunk sits within its 16-byte line; its copy in a peer's scratch slot sits there too,
// so the sum kernel can use 16-byte accesses on both (the ranks' buffers have the same layout).
size_t misalignment(const void* p) { return reinterpret_cast<uintptr_t>(p) & 15; }

}  // namespace

size_t CopyEngineAllReduce::slot_bytes(size_t bytes, int n) {
  // Chunks are cut at multiples of 64 elements (up to 252 more bytes than bytes / n) and sit at
  // their own address modulo 16 in the slot (up to 15 more): 512 bytes of slack cover both. A
  // ZeRO-1 chunk, ceil(count / n) elements, is at most 3 bytes more than bytes / n: covered too.
  return round_up((bytes + n - 1) / n, 256) + 512;
}

size_t CopyEngineAllReduce::planned_device_bytes(const std::vector<size_t>& bucket_bytes, int n) {
  size_t s = 0;
  for (size_t b : bucket_bytes) s += (n - 1) * slot_bytes(b, n);
  return s + flag_count(bucket_bytes.size(), n) * sizeof(int32_t);
}

CopyEngineAllReduce::CopyEngineAllReduce(MPI_Comm comm, const std::vector<Region>& buffers,
                                         const std::vector<size_t>& bucket_bytes)
    : buckets_(bucket_bytes.size()), regions_(buffers) {
  MPI_CHECK(MPI_Comm_rank(comm, &rank_));
  MPI_CHECK(MPI_Comm_size(comm, &n_));
  size_t total = 0;
  for (size_t b = 0; b < buckets_; ++b) {
    scratch_offset_.push_back(total);
    bucket_bytes_.push_back(bucket_bytes[b]);
    slot_bytes_.push_back(slot_bytes(bucket_bytes[b], n_));
    total += (n_ - 1) * slot_bytes_.back();
  }
  scratch_ = DeviceBuffer<uint8_t>(total, "copy-engine all-reduce scratch");
  flags_ = DeviceBuffer<int32_t>(flag_count(buckets_, n_), "copy-engine all-reduce flags");
  one_ = DeviceBuffer<int32_t>(1, "copy-engine all-reduce flag value");
  // Every flag down, except the free flags (phase Free and max_over_ranks'): every scratch slot
  // and max slot starts free.
  std::vector<int32_t> initial(flags_.size(), 0);
  for (size_t b = 0; b < buckets_; ++b) std::fill_n(initial.begin() + group(Free, b) * n_, n_, 1);
  std::fill_n(initial.begin() + max_free_group() * n_, n_, 1);
  CUDA_CHECK(cudaMemcpy(flags_.get(), initial.data(), initial.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  const int32_t one = 1;
  CUDA_CHECK(cudaMemcpy(one_.get(), &one, sizeof one, cudaMemcpyHostToDevice));

  wait_fn_ = driver_entry("cuStreamWaitValue32");
  write_fn_ = driver_entry("cuStreamWriteValue32");
  const auto range = reinterpret_cast<AddressRangeFn>(driver_entry("cuMemGetAddressRange"));
  const auto attribute = reinterpret_cast<AttributeFn>(driver_entry("cuDeviceGetAttribute"));
  int dev = 0, flush = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  cu_check(attribute(&flush, CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES, dev), "cuDeviceGetAttribute");
  wait_flags_ = CU_STREAM_WAIT_VALUE_EQ | (flush ? CU_STREAM_WAIT_VALUE_FLUSH : 0);

  // Publish the regions, then the scratch and the flags, and gather everyone's.
  std::vector<Region> all = regions_;
  all.emplace_back(scratch_.get(), scratch_.size());
  all.emplace_back(flags_.get(), flags_.size() * sizeof(int32_t));
  std::vector<Published> mine(all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    CUdeviceptr base = 0;
    size_t size = 0;
    cu_check(range(&base, &size, reinterpret_cast<CUdeviceptr>(all[i].first)), "cuMemGetAddressRange");
    CUDA_CHECK(cudaIpcGetMemHandle(&mine[i].handle, reinterpret_cast<void*>(base)));
    mine[i].offset = reinterpret_cast<CUdeviceptr>(all[i].first) - base;
    mine[i].bytes = all[i].second;
  }
  std::vector<Published> everyone(all.size() * n_);
  const int bytes = static_cast<int>(all.size() * sizeof(Published));
  MPI_CHECK(MPI_Allgather(mine.data(), bytes, MPI_BYTE, everyone.data(), bytes, MPI_BYTE, comm));

  peer_regions_.assign(n_, std::vector<void*>(regions_.size(), nullptr));
  peer_scratch_.assign(n_, nullptr);
  peer_flags_.assign(n_, nullptr);
  std::string error;
  for (int j = 0; j < n_ && error.empty(); ++j) {
    if (j == rank_) continue;
    std::map<std::string, uint8_t*> opened;  // one mapping per peer allocation
    for (size_t i = 0; i < all.size(); ++i) {
      const Published& p = everyone[j * all.size() + i];
      if (p.bytes != all[i].second || p.offset % 16 != mine[i].offset % 16) {
        error = "rank " + std::to_string(j) + " has a different buffer layout";
        break;
      }
      const std::string key(reinterpret_cast<const char*>(&p.handle), sizeof p.handle);
      auto it = opened.find(key);
      if (it == opened.end()) {
        void* base = nullptr;
        const cudaError_t e = cudaIpcOpenMemHandle(&base, p.handle, cudaIpcMemLazyEnablePeerAccess);
        if (e != cudaSuccess) {
          cudaGetLastError();
          error = "cannot map the memory of rank " + std::to_string(j) + " (cudaIpcOpenMemHandle: " +
                  cudaGetErrorString(e) + ")";
          break;
        }
        opened_.push_back(base);
        it = opened.emplace(key, static_cast<uint8_t*>(base)).first;
      }
      uint8_t* at = it->second + p.offset;
      if (i < regions_.size()) peer_regions_[j][i] = at;
      else if (i == regions_.size()) peer_scratch_[j] = at;
      else peer_flags_[j] = reinterpret_cast<int32_t*>(at);
    }
  }
  // Every rank learns whether every rank could map its peers, so all of them fail together.
  int ok = error.empty() ? 1 : 0;
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_LAND, comm));
  if (!ok) {
    for (void* p : opened_) cudaIpcCloseMemHandle(p);  // the destructor does not run
    opened_.clear();
    throw std::runtime_error(
        "--allreduce copy-engine: " + (error.empty() ? std::string("another rank could not map its peers' memory") : error) +
        ". It needs every rank on one node, each able to open its peers' GPU memory (CUDA IPC); "
        "use --allreduce nccl otherwise.");
  }
  CUDA_CHECK(cudaDeviceSynchronize());  // the flags' memset and the value 1 are in device memory
  MPI_CHECK(MPI_Barrier(comm));         // every flag is cleared before any rank can raise one
}

CopyEngineAllReduce::~CopyEngineAllReduce() {
  await_free_flags();
  for (void* p : opened_) cudaIpcCloseMemHandle(p);
}

void CopyEngineAllReduce::await_free_flags() const noexcept {
  // The free flags are the only writes into this rank's memory that it does not wait for itself
  // (each peer raises them after its last read); all of them are up again once the peers are done.
  if (n_ < 2 || flags_.size() == 0) return;
  std::vector<int32_t> h(flags_.size());
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(2);  // a peer may have failed
  do {
    if (cudaMemcpy(h.data(), flags_.get(), h.size() * sizeof(int32_t), cudaMemcpyDeviceToHost) != cudaSuccess) {
      cudaGetLastError();
      return;
    }
    bool up = std::all_of(h.begin() + max_free_group() * n_, h.begin() + (max_free_group() + 1) * n_,
                          [](int32_t f) { return f == 1; });
    for (size_t b = 0; b < buckets_ && up; ++b)
      up = std::all_of(h.begin() + group(Free, b) * n_, h.begin() + (group(Free, b) + 1) * n_,
                       [](int32_t f) { return f == 1; });
    if (up) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  } while (std::chrono::steady_clock::now() < give_up);
}

size_t CopyEngineAllReduce::region_of(const void* local) const {
  const auto* p = static_cast<const uint8_t*>(local);
  for (size_t i = 0; i < regions_.size(); ++i) {
    const auto* base = static_cast<const uint8_t*>(regions_[i].first);
    if (p >= base && p < base + regions_[i].second) return i;
  }
  throw std::invalid_argument("CopyEngineAllReduce: data outside every registered buffer");
}

void* CopyEngineAllReduce::peer_address(int peer, const void* local) const {
  const size_t i = region_of(local);
  return static_cast<uint8_t*>(peer_regions_[peer][i]) +
         (static_cast<const uint8_t*>(local) - static_cast<const uint8_t*>(regions_[i].first));
}

void CopyEngineAllReduce::raise_flag(int peer, size_t g, cudaStream_t s) {
  int32_t* flag = peer_flags_[peer] + g * n_ + rank_;
  CUDA_CHECK(cudaMemcpyAsync(flag, one_.get(), sizeof(int32_t), cudaMemcpyDeviceToDevice, s));
}

void CopyEngineAllReduce::raise_flags(size_t g, cudaStream_t s) {
  for (int k = 1; k < n_; ++k) raise_flag((rank_ + k) % n_, g, s);
}

void CopyEngineAllReduce::wait_flags(size_t g, cudaStream_t s) {
  const auto wait = reinterpret_cast<WaitWriteFn>(wait_fn_);
  const auto write = reinterpret_cast<WaitWriteFn>(write_fn_);
  for (int j = 0; j < n_; ++j) {
    if (j == rank_) continue;
    const auto flag = reinterpret_cast<CUdeviceptr>(flags_.get() + g * n_ + j);
    cu_check(wait(reinterpret_cast<CUstream>(s), flag, 1, wait_flags_), "cuStreamWaitValue32");
    cu_check(write(reinterpret_cast<CUstream>(s), flag, 0, 0), "cuStreamWriteValue32");
  }
}

size_t CopyEngineAllReduce::flag_count(size_t buckets, int n) { return (3 * buckets + 3) * n + 2 * n; }

int32_t* CopyEngineAllReduce::nonfinite_slots() const { return flags_.get() + (3 * buckets_ + 3) * n_; }

int32_t* CopyEngineAllReduce::max_slots() const { return nonfinite_slots() + n_; }

size_t CopyEngineAllReduce::slot_offset(size_t bucket, int sender, int receiver) const {
  const int slot = sender < receiver ? sender : sender - 1;
  return scratch_offset_[bucket] + slot * slot_bytes_[bucket];
}

void CopyEngineAllReduce::begin_step(cudaStream_t s) {
  const auto write = reinterpret_cast<WaitWriteFn>(write_fn_);
  cu_check(write(reinterpret_cast<CUstream>(s), reinterpret_cast<CUdeviceptr>(nonfinite_slots() + rank_), 0, 0),
           "cuStreamWriteValue32");
}

void CopyEngineAllReduce::exchange_nonfinite(cudaStream_t s) {
  for (int k = 1; k < n_; ++k) {
    const int j = (rank_ + k) % n_;
    int32_t* theirs = peer_flags_[j] + (nonfinite_slots() - flags_.get()) + rank_;
    CUDA_CHECK(cudaMemcpyAsync(theirs, nonfinite_slots() + rank_, sizeof(int32_t), cudaMemcpyDeviceToDevice, s));
    raise_flag(j, nonfinite_group(), s);
  }
  wait_flags(nonfinite_group(), s);
}

void CopyEngineAllReduce::check_payload(size_t bucket, const void* data, size_t bytes, size_t es,
                                        bool registered) const {
  if (bucket >= buckets_) throw std::invalid_argument("CopyEngineAllReduce: bucket index out of range");
  if (bytes > bucket_bytes_[bucket])
    throw std::invalid_argument("CopyEngineAllReduce: " + std::to_string(bytes) + " bytes for bucket " +
                                std::to_string(bucket) + " of " + std::to_string(bucket_bytes_[bucket]));
  if (reinterpret_cast<uintptr_t>(data) % es != 0)
    throw std::invalid_argument("CopyEngineAllReduce: data not aligned to its element size");
  if (registered && bytes > 0) {
    const auto* last = static_cast<const uint8_t*>(data) + bytes - 1;
    if (region_of(data) != region_of(last))
      throw std::invalid_argument("CopyEngineAllReduce: data spans more than one registered buffer");
  }
}

CopyEngineAllReduce::Chunks CopyEngineAllReduce::chunks(size_t count) const {
  // Chunk j = elements [j*cs, min((j+1)*cs, count)); cs a multiple of 64 elements (aligned copies).
  return Chunks{count, round_up((count + n_ - 1) / n_, 64)};
}

size_t CopyEngineAllReduce::Chunks::begin(int j) const { return std::min(count, j * size); }
size_t CopyEngineAllReduce::Chunks::length(int j) const { return std::min(count, (j + 1) * size) - begin(j); }

void CopyEngineAllReduce::scatter(size_t bucket, const uint8_t* payload, const Chunks& c, size_t es, cudaStream_t s) {
  for (int k = 1; k < n_; ++k) {
    const int j = (rank_ + k) % n_;
    const uint8_t* src = payload + c.begin(j) * es;
    if (c.length(j) > 0)
      CUDA_CHECK(cudaMemcpyAsync(peer_scratch_[j] + slot_offset(bucket, rank_, j) + misalignment(src), src,
                                 c.length(j) * es, cudaMemcpyDeviceToDevice, s));
    raise_flag(j, group(Scattered, bucket), s);
  }
  wait_flags(group(Scattered, bucket), s);
}

const uint8_t* CopyEngineAllReduce::received(size_t bucket, const void* mine) const {
  return scratch_.get() + scratch_offset_[bucket] + misalignment(mine);
}

void CopyEngineAllReduce::gather(size_t bucket, const uint8_t* mine, size_t bytes, cudaStream_t s) {
  for (int k = 1; k < n_; ++k) {
    const int j = (rank_ + k) % n_;
    if (bytes > 0) CUDA_CHECK(cudaMemcpyAsync(peer_address(j, mine), mine, bytes, cudaMemcpyDeviceToDevice, s));
    raise_flag(j, group(Gathered, bucket), s);
  }
  wait_flags(group(Gathered, bucket), s);
}

void CopyEngineAllReduce::all_reduce(size_t bucket, void* data, size_t count, DType t, float scale,
                                     cudaStream_t s) {
  const size_t es = dtype_bytes(t);
  check_payload(bucket, data, count * es, es);  // before anything is enqueued: a throw raises no flag
  const Chunks c = chunks(count);
  auto* bytes = static_cast<uint8_t*>(data);
  // 1. Reduce-scatter: chunk j to rank j's scratch slot for this rank; wait for the peers' copies.
  scatter(bucket, bytes, c, es, s);
  // 2. Sum this rank's chunk with its peers' copies.
  uint8_t* mine = bytes + c.begin(rank_) * es;
  ce_sum_chunk(mine, received(bucket, mine), c.length(rank_), n_ - 1, slot_bytes_[bucket] / es, scale, t, s,
               nonfinite_slots() + rank_);
  // 3. All-gather: the summed chunk into every peer's buffer, then wait for theirs.
  gather(bucket, mine, c.length(rank_) * es, s);
}

void CopyEngineAllReduce::all_reduce_16bit(size_t bucket, float* x, uint16_t* staging, size_t count, DType t,
                                           float divisor, cudaStream_t s, const std::function<void()>& mark) {
  if (t == DType::F32) throw std::invalid_argument("CopyEngineAllReduce::all_reduce_16bit: fp16 or bf16 payload only");
  check_payload(bucket, x, count * sizeof(float), sizeof(float), false);
  check_payload(bucket, staging, count * sizeof(uint16_t), sizeof(uint16_t));
  const Chunks c = chunks(count);
  const size_t own = c.begin(rank_), own_len = c.length(rank_), after = own + own_len;
  // 1. Only the peers' chunks are cast (the elements before and after this rank's chunk).
  cast_to_16bit(x, own, divisor, t, staging, s);
  cast_to_16bit(x + after, count - after, divisor, t, staging + after, s);
  if (mark) mark();
  // 2. Reduce-scatter of the 16-bit payload.
  auto* payload = reinterpret_cast<uint8_t*>(staging);
  scatter(bucket, payload, c, sizeof(uint16_t), s);
  // 3. The own chunk cast, summed and decompressed in one pass; its 16-bit result goes out next.
  ce_sum_chunk_16bit(x + own, staging + own, reinterpret_cast<const uint16_t*>(received(bucket, staging + own)),
                     own_len, n_ - 1, slot_bytes_[bucket] / sizeof(uint16_t), divisor, t, s, nonfinite_slots() + rank_);
  // 4. All-gather of the 16-bit results; only the peers' chunks are cast back.
  gather(bucket, payload + own * sizeof(uint16_t), own_len * sizeof(uint16_t), s);
  if (mark) mark();
  cast_from_16bit(staging, own, t, x, s);
  cast_from_16bit(staging + after, count - after, t, x + after, s);
}

// ---------------------------------------------------------------- ZeRO-1

void CopyEngineAllReduce::reduce_scatter(size_t bucket, void* data, size_t count, DType t, float scale,
                                         cudaStream_t s) {
  if (t != DType::F32) throw std::invalid_argument("CopyEngineAllReduce::reduce_scatter: fp32 payload only");
  const size_t es = sizeof(float);
  check_payload(bucket, data, count * es, es);  // before anything is enqueued: a throw raises no flag
  // The shard plan's chunks, in the Chunks form scatter() takes (chunk j = [j c, min(count, (j + 1) c))).
  const Chunks c{count, shard_chunk(count, n_)};
  auto* bytes = static_cast<uint8_t*>(data);
  wait_flags(group(Free, bucket), s);  // every peer has read what this rank last put in its scratch
  scatter(bucket, bytes, c, es, s);
  uint8_t* mine = bytes + c.begin(rank_) * es;
  ce_sum_chunk(mine, received(bucket, mine), c.length(rank_), n_ - 1, slot_bytes_[bucket] / es, scale, t, s);
  raise_flags(group(Free, bucket), s);  // the sum has read the peers' copies
}

void CopyEngineAllReduce::all_gather(size_t bucket, void* data, size_t count, DType t, cudaStream_t s) {
  const size_t es = dtype_bytes(t);
  check_payload(bucket, data, count * es, es, false);  // before anything is enqueued: a throw raises no flag
  const size_t c = shard_chunk(count, n_);
  auto* bytes = static_cast<uint8_t*>(data);
  // This rank's chunk into its slot of every peer's scratch (at the slot's start: the peers'
  // buffers need not share this one's alignment), flags raised; then the peers' chunks, once
  // arrived, from this rank's scratch into their places.
  wait_flags(group(Free, bucket), s);
  const size_t own = shard_count(count, n_, rank_) * es;
  for (int k = 1; k < n_; ++k) {
    const int j = (rank_ + k) % n_;
    if (own > 0)
      CUDA_CHECK(cudaMemcpyAsync(peer_scratch_[j] + slot_offset(bucket, rank_, j), bytes + rank_ * c * es, own,
                                 cudaMemcpyDeviceToDevice, s));
    raise_flag(j, group(Gathered, bucket), s);
  }
  wait_flags(group(Gathered, bucket), s);
  for (int j = 0; j < n_; ++j) {
    const size_t theirs = shard_count(count, n_, j) * es;
    if (j == rank_ || theirs == 0) continue;
    CUDA_CHECK(cudaMemcpyAsync(bytes + j * c * es, scratch_.get() + slot_offset(bucket, j, rank_), theirs,
                               cudaMemcpyDeviceToDevice, s));
  }
  raise_flags(group(Free, bucket), s);  // the copies out have read the peers' chunks
}

void CopyEngineAllReduce::max_over_ranks(int32_t* d_value, cudaStream_t s) {
  // The value into slot `rank` of every rank's max slots (this rank's own by a local copy), then
  // the maximum of the n slots; the peers learn when their slot is free again.
  wait_flags(max_free_group(), s);
  const size_t at = (max_slots() - flags_.get()) + rank_;
  for (int k = 1; k < n_; ++k) {
    const int j = (rank_ + k) % n_;
    CUDA_CHECK(cudaMemcpyAsync(peer_flags_[j] + at, d_value, sizeof(int32_t), cudaMemcpyDeviceToDevice, s));
    raise_flag(j, max_group(), s);
  }
  CUDA_CHECK(cudaMemcpyAsync(flags_.get() + at, d_value, sizeof(int32_t), cudaMemcpyDeviceToDevice, s));
  wait_flags(max_group(), s);
  ce_max_slots(max_slots(), n_, d_value, s);
  raise_flags(max_free_group(), s);
}

}  // namespace vitddp
