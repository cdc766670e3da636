// The copy-engine transport: CopyEngineAllReduce (CUDA IPC peer copies + the sum kernel,
// mpi/transports/copy_engine_allreduce_gpu.h) for ranks on one node; NCCL on one rank. With
// --shard-optimizer (ZeRO-1) its reduce-scatter, all-gather and max exchange.
#include <mpi.h>

#include <stdexcept>

#include "cuda/kernels/ce_reduce.h"
#include "mpi/transports/copy_engine_allreduce_gpu.h"
#include "mpi/transports/gpu_transport_gpu.h"

namespace vitddp {

namespace {

/// Buckets on comm stream b mod comm_streams; the sum kernel flags NaN/Inf (begin_step clears
/// this rank's slot, end_step exchanges the slots); fp16/bf16 with the own chunk's casts fused.
/// ZeRO-1: no check in the reduction (the engine flags its own chunks and agrees by
/// max_over_ranks, as over NCCL), so begin_step and end_step do nothing.
class CopyEngineTransport final : public GpuTransport {
 public:
  explicit CopyEngineTransport(const GpuTransportArgs& a)
      : world_size_(a.world_size), sharded_(a.options.shard_optimizer),
        ce_(MPI_COMM_WORLD, a.regions, a.bucket_bytes) {}
  const char* name() const override { return "copy-engine"; }
  void all_reduce(size_t bucket, void* data, size_t count, DType t, ReduceOp op, cudaStream_t s) override {
    ce_.all_reduce(bucket, data, count, t, scale(op), s);
  }
  bool fuses_16bit_casts() const override { return true; }
  void all_reduce_16bit(size_t bucket, float* x, uint16_t* staging, size_t count, DType t, float divisor,
                        cudaStream_t s, const std::function<void()>& mark) override {
    ce_.all_reduce_16bit(bucket, x, staging, count, t, divisor, s, mark);
  }
  void begin_step(cudaStream_t compute) override {
    if (!sharded_) ce_.begin_step(compute);
  }
  void end_step(cudaStream_t comm) override {
    if (!sharded_) ce_.exchange_nonfinite(comm);
  }
  bool checks_nonfinite() const override { return !sharded_; }
  void flag_nonfinite(int* d_flag, cudaStream_t s) const override {
    if (sharded_)
      throw std::logic_error("flag_nonfinite: the copy-engine reduce-scatter of --shard-optimizer does not check "
                             "for NaN/Inf (the engine flags its chunks and calls max_over_ranks)");
    ce_or_flags(ce_.nonfinite_slots(), ce_.world_size(), d_flag, s);
  }
  bool uses_copy_engines() const override { return true; }
  size_t device_bytes() const override { return ce_.device_bytes(); }

  bool shards() const override { return true; }
  void reduce_scatter(size_t bucket, void* data, size_t count, DType t, ReduceOp op, cudaStream_t s) override {
    ce_.reduce_scatter(bucket, data, count, t, scale(op), s);
  }
  void all_gather(size_t bucket, void* data, size_t count, DType t, cudaStream_t s) override {
    ce_.all_gather(bucket, data, count, t, s);
  }
  void max_over_ranks(int* d_value, cudaStream_t s) override { ce_.max_over_ranks(d_value, s); }

 private:
  float scale(ReduceOp op) const { return op == ReduceOp::Avg ? 1.0f / static_cast<float>(world_size_) : 1.0f; }

  int world_size_;
  bool sharded_;
  CopyEngineAllReduce ce_;
};

}  // namespace

bool uses_copy_engine(const ReducerOptions& o, int world_size) { return o.allreduce == "copy-engine" && world_size > 1; }

// The registry's plan and factory (mpi/transports/gpu_registry_gpu.cpp).
GpuTransportPlan plan_copy_engine_transport(const ReducerOptions& o, int world_size,
                                            const std::vector<size_t>& bucket_bytes) {
  GpuTransportPlan p;
  p.registered_buffers_only = true;  // PowerSGD's P and Q are refused on one rank too, as on many
  p.shards = true;                   // ZeRO-1 (on one rank: NCCL's, below)
  if (world_size > 1) {
    p.comm_streams = o.comm_streams;
    p.device_bytes = CopyEngineAllReduce::planned_device_bytes(bucket_bytes, world_size);
  }
  return p;
}

std::unique_ptr<GpuTransport> make_copy_engine_transport(const GpuTransportArgs& a) {
  if (a.world_size == 1) return gpu_transport("nccl").make(a);  // nothing to move
  return std::make_unique<CopyEngineTransport>(a);
}

}  // namespace vitddp
