// Error checks for CUDA runtime calls: a failure throws std::runtime_error naming the call, the
// file and line, and the rank (cuda/check/api_error.h).
#pragma once
#include <cuda_runtime.h>

#include "cuda/check/api_error.h"

#define CUDA_CHECK(call)                                                                 \
  do {                                                                                   \
    cudaError_t err_ = (call);                                                           \
    if (err_ != cudaSuccess)                                                             \
      ::vitddp::throw_api_error("CUDA", #call, cudaGetErrorString(err_), __FILE__, __LINE__); \
  } while (0)

/// Checks the last kernel launch (launch-configuration errors) without synchronising.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
