// The common error path of the library check macros (cuda/check/check_cuda.h, cuda/check/check_cublaslt.h,
// cuda/check/check_cudnn.h, mpi/world/nccl_check_gpu.h): failures throw std::runtime_error whose message
// names the library, the call, the file and line, and the rank (read from the MPI launcher's
// environment, so no global state is needed). main() turns the exception into MPI_Abort.
// Includes no library header.
#pragma once
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace vitddp {

/// "rank N" from OMPI_COMM_WORLD_RANK / PMI_RANK / SLURM_PROCID, or "rank ?" outside a launcher.
inline std::string launcher_rank_label() {
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* s = std::getenv(v)) return std::string("rank ") + s;
  return "rank 0";
}

/// Throws std::runtime_error("<rank>: <api> call failed at <file>:<line>: <call>: <what>").
[[noreturn]] inline void throw_api_error(const char* api, const char* call, const std::string& what,
                                         const char* file, int line) {
  throw std::runtime_error(launcher_rank_label() + ": " + api + " call failed at " + file + ":" +
                           std::to_string(line) + ": " + call + ": " + what);
}

}  // namespace vitddp
