// Error checks for cuBLASLt calls: a failure throws std::runtime_error naming the call, the file
// and line, and the rank (cuda/check/api_error.h).
#pragma once
#include <cublasLt.h>

#include "cuda/check/api_error.h"

#define CUBLAS_CHECK(call)                                                                  \
  do {                                                                                      \
    cublasStatus_t st_ = (call);                                                            \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                       \
      ::vitddp::throw_api_error("cuBLASLt", #call, cublasLtGetStatusString(st_), __FILE__, __LINE__); \
  } while (0)
