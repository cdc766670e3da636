// The GPU backend's transports by --allreduce value. A new one is one file under
// mpi/transports/ (named *_gpu.cpp) defining its plan `GpuTransportPlan plan_..._transport(const
// ReducerOptions&, int, const std::vector<size_t>&)` and factory `std::unique_ptr<GpuTransport>
// make_..._transport(const GpuTransportArgs&)`, plus one line in the list.
#include <stdexcept>

#include "mpi/transports/gpu_transport_gpu.h"

// X(--allreduce value, plan, factory), in --help order.
#define VITDDP_GPU_TRANSPORTS(X)                                             \
  X("nccl", plan_nccl_transport, make_nccl_transport)                        \
  X("copy-engine", plan_copy_engine_transport, make_copy_engine_transport)

namespace vitddp {

#define VITDDP_DECLARE_TRANSPORT(name, plan, factory)                                                     \
  GpuTransportPlan plan(const ReducerOptions& options, int world_size, const std::vector<size_t>& bucket_bytes); \
  std::unique_ptr<GpuTransport> factory(const GpuTransportArgs& args);
VITDDP_GPU_TRANSPORTS(VITDDP_DECLARE_TRANSPORT)
#undef VITDDP_DECLARE_TRANSPORT

const std::vector<GpuTransportEntry>& gpu_transport_registry() {
#define VITDDP_TRANSPORT_ENTRY(name, plan, factory) {name, &plan, &factory},
  static const std::vector<GpuTransportEntry> entries = {VITDDP_GPU_TRANSPORTS(VITDDP_TRANSPORT_ENTRY)};
#undef VITDDP_TRANSPORT_ENTRY
  return entries;
}

const GpuTransportEntry& gpu_transport(const std::string& name) {
  std::string choices;
  for (const GpuTransportEntry& e : gpu_transport_registry()) {
    if (name == e.name) return e;
    choices += (choices.empty() ? "" : ", ") + std::string(e.name);
  }
  throw std::invalid_argument("unknown all-reduce transport '" + name + "' (choose one of: " + choices + ")");
}

void GpuTransport::all_reduce_16bit(size_t, float*, uint16_t*, size_t, DType, float, cudaStream_t,
                                    const std::function<void()>&) {
  throw std::logic_error(std::string("all_reduce_16bit: the ") + name() + " transport does not fuse the 16-bit casts");
}

void GpuTransport::reduce_scatter(size_t, void*, size_t, DType, ReduceOp, cudaStream_t) {
  throw std::logic_error(std::string("reduce_scatter: the ") + name() + " transport has no reduce-scatter (--shard-optimizer)");
}

void GpuTransport::all_gather(size_t, void*, size_t, DType, cudaStream_t) {
  throw std::logic_error(std::string("all_gather: the ") + name() + " transport has no all-gather (--shard-optimizer)");
}

void GpuTransport::max_over_ranks(int*, cudaStream_t) {
  throw std::logic_error(std::string("max_over_ranks: the ") + name() + " transport has no flag exchange (--shard-optimizer)");
}

void GpuTransport::flag_nonfinite(int*, cudaStream_t) const {
  throw std::logic_error(std::string("flag_nonfinite: only with the copy-engine all-reduce, not ") + name());
}

}  // namespace vitddp
