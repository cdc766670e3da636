// The GPU backend's transports by --allreduce value. A new one is one file under
// mpi/transports/ with its plan and factory, plus one line here.
#include <stdexcept>

#include "mpi/transports/gpu_transport_gpu.h"

namespace vitddp {

const std::vector<GpuTransportEntry>& gpu_transport_registry() {
  static const std::vector<GpuTransportEntry> entries = {
      {"nccl", &plan_nccl_transport, &make_nccl_transport},
      {"copy-engine", &plan_copy_engine_transport, &make_copy_engine_transport},
  };
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

void GpuTransport::flag_nonfinite(int*, cudaStream_t) const {
  throw std::logic_error(std::string("flag_nonfinite: only with the copy-engine all-reduce, not ") + name());
}

}  // namespace vitddp
