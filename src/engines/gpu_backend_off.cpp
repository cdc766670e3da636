// The GPU backend's entry points in the CPU-only build (VITDDP_GPU=OFF, or no CUDA toolkit found:
// CMakeLists.txt compiles this file instead of the *_gpu.cpp sources). Every one refuses with one
// line naming the option; main() checks gpu_backend_built() first, so these throws are the last
// line of defence. Includes no CUDA, cuDNN or NCCL header.
#include <stdexcept>
#include <string>

#include "src/engines/engine.h"
#include "src/engines/gpu_model_options.h"
#include "src/engines/memory_estimate.h"
#include "src/engines/topology.h"
#include "src/app/versions.h"

namespace vitddp {

bool gpu_backend_built() { return false; }

int visible_cuda_devices() { return 0; }

// EngineSetupError: every rank leaves with exit code 2; rank 0 alone says why (one line).
std::unique_ptr<Engine> make_gpu_engine(const Options&, const World& w, const ParamLayout&, std::vector<Bucket>,
                                        const std::vector<float>*) {
  throw EngineSetupError(w.rank == 0 ? gpu_backend_missing("--backend gpu") : "");
}

MemoryEstimate estimate_gpu_memory(const Options&, const ParamLayout&, const std::vector<Bucket>&, int) {
  throw std::invalid_argument(gpu_backend_missing("--dry-run"));
}

MemoryEstimate estimate_gpu_memory(const Options&, int) { throw std::invalid_argument(gpu_backend_missing("--dry-run")); }

GpuViTOptions gpu_model_options(const Options&, const ParamLayout&) {
  throw std::invalid_argument(gpu_backend_missing("--backend gpu"));
}

// No GPU library is linked: --version lists MPI and HDF5 only.
std::vector<std::pair<std::string, std::string>> gpu_library_versions() { return {}; }

GpuTopology query_gpu_topology(int) {
  GpuTopology t;
  t.status = "GPU backend not built";
  return t;
}

}  // namespace vitddp
