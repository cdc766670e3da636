// What --version prints: vitddp's own version and those of the libraries it runs on, each queried
// at run time where the library can tell (the loaded library may differ from the headers).
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace vitddp {

/// (library, version) of the GPU libraries, queried at run time: CUDA runtime
/// (cudaRuntimeGetVersion), CUDA driver (cudaDriverGetVersion; "none" without a driver),
/// cuBLASLt (cublasLtGetVersion), cuDNN (cudnnGetVersion), NCCL (ncclGetVersion). Needs no GPU.
/// Defined in src/app/gpu_versions_gpu.cpp; the CPU-only build (src/engines/gpu_backend_off.cpp)
/// defines it to return {}.
std::vector<std::pair<std::string, std::string>> gpu_library_versions();

/// The --version text: "vitddp <git commit>" on the first line, then one line per library: the GPU
/// libraries above, MPI (MPI_Get_library_version's first line; MPI must be initialised) and HDF5
/// (H5get_libversion).
std::string version_text();

}  // namespace vitddp
