// The GPU half of --version (src/app/versions.h): CUDA, cuBLASLt, cuDNN and NCCL as loaded at run time.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include "cuda/check/cudnn_version.h"
#include "mpi/world/nccl_comm_gpu.h"
#include "src/app/versions.h"

namespace vitddp {
namespace {

/// CUDA's 1000 * major + 10 * minor (e.g. 13000) as "13.0".
std::string cuda_version(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

}  // namespace

std::vector<std::pair<std::string, std::string>> gpu_library_versions() {
  int runtime = 0, driver = 0;
  const bool rt_ok = cudaRuntimeGetVersion(&runtime) == cudaSuccess;
  const bool drv_ok = cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0;
  const size_t lt = cublasLtGetVersion();  // major * 10000 + minor * 100 + patch
  return {
      {"CUDA runtime", rt_ok ? cuda_version(runtime) : "unknown"},
      {"CUDA driver", drv_ok ? cuda_version(driver) : "none"},
      {"cuBLASLt", std::to_string(lt / 10000) + "." + std::to_string(lt / 100 % 100) + "." + std::to_string(lt % 100)},
      {"cuDNN", cudnn_runtime_version()},
      {"NCCL", nccl_version_string()},
  };
}

}  // namespace vitddp
