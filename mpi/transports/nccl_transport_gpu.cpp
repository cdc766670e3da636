// The NCCL transport: ncclAllReduce on the comm stream (SM-driven kernels); with --shard-optimizer
// (ZeRO-1) ncclReduceScatter and ncclAllGather in place, and a one-int ncclAllReduce(max) for the skip flag.
#include <algorithm>

#include "cuda/check/check_cuda.h"
#include "cuda/model/device_buffer.h"
#include "mpi/buckets/shard_plan.h"
#include "mpi/transports/gpu_transport_gpu.h"
#include "mpi/world/nccl_check_gpu.h"

namespace vitddp {

namespace {

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::F16: return ncclFloat16;
    case DType::BF16: return ncclBfloat16;
  }
  return ncclFloat32;
}

/// ZeRO-1: NCCL's reduce-scatter and all-gather take N equal chunks, so a bucket whose size n is
/// not a multiple of N goes through a scratch buffer padded to N c elements (c = ceil(n / N)):
/// the bytes of the largest such fp32 bucket; 0 when every bucket divides (or without sharding).
size_t padded_scratch_bytes(const ReducerOptions& o, int world_size, const std::vector<size_t>& bucket_bytes) {
  if (!o.shard_optimizer) return 0;
  size_t most = 0;
  for (size_t bytes : bucket_bytes) {
    const size_t n = bytes / sizeof(float), c = shard_chunk(n, world_size);
    if (c * (size_t)world_size != n) most = std::max(most, c * (size_t)world_size * sizeof(float));
  }
  return most;
}

class NcclTransport final : public GpuTransport {
 public:
  NcclTransport(ncclComm_t comm, int world_size, size_t scratch_bytes)
      : comm_(comm), world_size_(world_size),
        scratch_(scratch_bytes, "ZeRO-1 padded bucket scratch (buckets not divisible by the rank count)") {
    NCCL_CHECK(ncclCommUserRank(comm_, &rank_));
  }
  const char* name() const override { return "nccl"; }
  void all_reduce(size_t, void* data, size_t count, DType t, ReduceOp op, cudaStream_t s) override {
    NCCL_CHECK(ncclAllReduce(data, data, count, nccl_type(t), op == ReduceOp::Avg ? ncclAvg : ncclSum, comm_, s));
  }
  size_t device_bytes() const override { return scratch_.size(); }

  bool shards() const override { return true; }
  // In place (NCCL: recvbuff = sendbuff + rank * recvcount for the reduce-scatter, sendbuff =
  // recvbuff + rank * sendcount for the all-gather) when the bucket is N equal chunks; otherwise
  // through the scratch padded to N c elements, in place there.
  void reduce_scatter(size_t, void* data, size_t count, DType t, ReduceOp op, cudaStream_t s) override {
    const size_t c = shard_chunk(count, world_size_), bytes = dtype_bytes(t), mine = shard_count(count, world_size_, rank_);
    char* own = static_cast<char*>(data) + rank_ * c * bytes;
    const ncclRedOp_t nop = op == ReduceOp::Avg ? ncclAvg : ncclSum;
    if (c * world_size_ == count) {
      NCCL_CHECK(ncclReduceScatter(data, own, c, nccl_type(t), nop, comm_, s));
      return;
    }
    char* pad = padded(c, bytes);  // the bucket, then zeros up to N c
    CUDA_CHECK(cudaMemcpyAsync(pad, data, count * bytes, cudaMemcpyDeviceToDevice, s));
    CUDA_CHECK(cudaMemsetAsync(pad + count * bytes, 0, (c * world_size_ - count) * bytes, s));
    NCCL_CHECK(ncclReduceScatter(pad, pad + rank_ * c * bytes, c, nccl_type(t), nop, comm_, s));
    if (mine) CUDA_CHECK(cudaMemcpyAsync(own, pad + rank_ * c * bytes, mine * bytes, cudaMemcpyDeviceToDevice, s));
  }
  void all_gather(size_t, void* data, size_t count, DType t, cudaStream_t s) override {
    const size_t c = shard_chunk(count, world_size_), bytes = dtype_bytes(t), mine = shard_count(count, world_size_, rank_);
    char* own = static_cast<char*>(data) + rank_ * c * bytes;
    if (c * world_size_ == count) {
      NCCL_CHECK(ncclAllGather(own, data, c, nccl_type(t), comm_, s));
      return;
    }
    char* pad = padded(c, bytes);  // own chunk in its place (the last rank's padding: whatever is there), gathered, copied out
    if (mine) CUDA_CHECK(cudaMemcpyAsync(pad + rank_ * c * bytes, own, mine * bytes, cudaMemcpyDeviceToDevice, s));
    NCCL_CHECK(ncclAllGather(pad + rank_ * c * bytes, pad, c, nccl_type(t), comm_, s));
    CUDA_CHECK(cudaMemcpyAsync(data, pad, count * bytes, cudaMemcpyDeviceToDevice, s));
  }
  void max_over_ranks(int* d_value, cudaStream_t s) override {
    NCCL_CHECK(ncclAllReduce(d_value, d_value, 1, ncclInt32, ncclMax, comm_, s));
  }

 private:
  /// The scratch for N c elements of `bytes` each; std::logic_error when the plan left it too small.
  char* padded(size_t c, size_t bytes) {
    if (c * world_size_ * bytes > scratch_.size())
      throw std::logic_error("nccl transport: the padded bucket scratch is smaller than the bucket");
    return scratch_.get();
  }

  ncclComm_t comm_;
  int world_size_, rank_ = 0;
  DeviceBuffer<char> scratch_;
};

}  // namespace

// The registry's plan and factory (mpi/transports/gpu_registry_gpu.cpp).
GpuTransportPlan plan_nccl_transport(const ReducerOptions& o, int world_size, const std::vector<size_t>& bucket_bytes) {
  // One padded scratch serves every bucket: safe because NCCL buckets run on one comm stream
  // (GpuTransportPlan::comm_streams keeps its default of 1); several streams would race on it.
  GpuTransportPlan p;
  p.device_bytes = padded_scratch_bytes(o, world_size, bucket_bytes);
  p.shards = true;
  return p;
}

std::unique_ptr<GpuTransport> make_nccl_transport(const GpuTransportArgs& a) {
  return std::make_unique<NcclTransport>(a.comm, a.world_size,
                                         padded_scratch_bytes(a.options, a.world_size, a.bucket_bytes));
}

}  // namespace vitddp
