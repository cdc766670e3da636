// Error checks for cuDNN calls: a failure throws std::runtime_error naming the call, the file and
// line, and the rank (cuda/check/api_error.h).
#pragma once
#include <cudnn.h>

#include "cuda/check/api_error.h"

#define CUDNN_CHECK(call)                                                                 \
  do {                                                                                    \
    cudnnStatus_t st_ = (call);                                                           \
    if (st_ != CUDNN_STATUS_SUCCESS)                                                      \
      ::vitddp::throw_api_error("cuDNN", #call, cudnnGetErrorString(st_), __FILE__, __LINE__); \
  } while (0)
