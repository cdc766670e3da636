// The copy-engine transport: CopyEngineAllReduce (CUDA IPC peer copies + the sum kernel,
// mpi/transports/copy_engine_allreduce_gpu.h) for ranks on one node; NCCL on one rank.
#include <mpi.h>

#include <stdexcept>

#include "cuda/kernels/ce_reduce.h"
#include "mpi/transports/copy_engine_allreduce_gpu.h"
#include "mpi/transports/gpu_transport_gpu.h"

namespace vitddp {

namespace {

/// Buckets on comm stream b mod comm_streams; the sum kernel flags NaN/Inf (begin_step clears
/// this rank's slot, end_step exchanges the slots); fp16/bf16 with the own chunk's casts fused.
class CopyEngineTransport final : public GpuTransport {
 public:
  explicit CopyEngineTransport(const GpuTransportArgs& a)
      : world_size_(a.world_size), ce_(MPI_COMM_WORLD, a.regions, a.bucket_bytes) {}
  const char* name() const override { return "copy-engine"; }
  void all_reduce(size_t bucket, void* data, size_t count, DType t, ReduceOp op, cudaStream_t s) override {
    ce_.all_reduce(bucket, data, count, t, op == ReduceOp::Avg ? 1.0f / static_cast<float>(world_size_) : 1.0f, s);
  }
  bool fuses_16bit_casts() const override { return true; }
  void all_reduce_16bit(size_t bucket, float* x, uint16_t* staging, size_t count, DType t, float divisor,
                        cudaStream_t s, const std::function<void()>& mark) override {
    ce_.all_reduce_16bit(bucket, x, staging, count, t, divisor, s, mark);
  }
  void begin_step(cudaStream_t compute) override { ce_.begin_step(compute); }
  void end_step(cudaStream_t comm) override { ce_.exchange_nonfinite(comm); }
  bool checks_nonfinite() const override { return true; }
  void flag_nonfinite(int* d_flag, cudaStream_t s) const override {
    ce_or_flags(ce_.nonfinite_slots(), ce_.world_size(), d_flag, s);
  }
  bool uses_copy_engines() const override { return true; }
  size_t device_bytes() const override { return ce_.device_bytes(); }

 private:
  int world_size_;
  CopyEngineAllReduce ce_;
};

}  // namespace

bool uses_copy_engine(const ReducerOptions& o, int world_size) { return o.allreduce == "copy-engine" && world_size > 1; }

// The registry's plan and factory (mpi/transports/gpu_registry_gpu.cpp).
GpuTransportPlan plan_copy_engine_transport(const ReducerOptions& o, int world_size,
                                            const std::vector<size_t>& bucket_bytes) {
  GpuTransportPlan p;
  p.registered_buffers_only = true;  // PowerSGD's P and Q are refused on one rank too, as on many
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
