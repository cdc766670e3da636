// The NCCL transport: ncclAllReduce on the comm stream (SM-driven kernels).
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

class NcclTransport final : public GpuTransport {
 public:
  explicit NcclTransport(ncclComm_t comm) : comm_(comm) {}
  const char* name() const override { return "nccl"; }
  void all_reduce(size_t, void* data, size_t count, DType t, ReduceOp op, cudaStream_t s) override {
    NCCL_CHECK(ncclAllReduce(data, data, count, nccl_type(t), op == ReduceOp::Avg ? ncclAvg : ncclSum, comm_, s));
  }

 private:
  ncclComm_t comm_;
};

}  // namespace

// The registry's plan and factory (mpi/transports/gpu_registry_gpu.cpp).
GpuTransportPlan plan_nccl_transport(const ReducerOptions&, int, const std::vector<size_t>&) { return {}; }

std::unique_ptr<GpuTransport> make_nccl_transport(const GpuTransportArgs& a) {
  return std::make_unique<NcclTransport>(a.comm);
}

}  // namespace vitddp
