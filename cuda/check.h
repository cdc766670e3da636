// Error checks for CUDA, cuBLASLt, cuDNN and NCCL calls: failures throw std::runtime_error whose
// message names the call, the file and line, and the rank (read from the MPI launcher's
// environment, so no global state is needed). main() turns the exception into MPI_Abort.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

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

[[noreturn]] inline void throw_api_error(const char* api, const char* call, const std::string& what,
                                         const char* file, int line) {
  throw std::runtime_error(launcher_rank_label() + ": " + api + " call failed at " + file + ":" +
                           std::to_string(line) + ": " + call + ": " + what);
}

}  // namespace vitddp

#define CUDA_CHECK(call)                                                                 \
  do {                                                                                   \
    cudaError_t err_ = (call);                                                           \
    if (err_ != cudaSuccess)                                                             \
      ::vitddp::throw_api_error("CUDA", #call, cudaGetErrorString(err_), __FILE__, __LINE__); \
  } while (0)

#define CUBLAS_CHECK(call)                                                                  \
  do {                                                                                      \
    cublasStatus_t st_ = (call);                                                            \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                       \
      ::vitddp::throw_api_error("cuBLASLt", #call, cublasLtGetStatusString(st_), __FILE__, __LINE__); \
  } while (0)

#define CUDNN_CHECK(call)                                                                 \
  do {                                                                                    \
    cudnnStatus_t st_ = (call);                                                           \
    if (st_ != CUDNN_STATUS_SUCCESS)                                                      \
      ::vitddp::throw_api_error("cuDNN", #call, cudnnGetErrorString(st_), __FILE__, __LINE__); \
  } while (0)

#define NCCL_CHECK(call)                                                                  \
  do {                                                                                    \
    ncclResult_t r_ = (call);                                                             \
    if (r_ != ncclSuccess && r_ != ncclInProgress)                                        \
      ::vitddp::throw_api_error("NCCL", #call, ncclGetErrorString(r_), __FILE__, __LINE__); \
  } while (0)

/// Checks the last kernel launch (launch-configuration errors) without synchronising.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
