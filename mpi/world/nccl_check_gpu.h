// Error checks for NCCL calls: a failure (anything but ncclSuccess and ncclInProgress, the
// non-blocking communicator's "still working") throws std::runtime_error naming the call, the
// file and line, and the rank (cuda/check/api_error.h).
#pragma once
#include <nccl.h>

#include "cuda/check/api_error.h"

#define NCCL_CHECK(call)                                                                  \
  do {                                                                                    \
    ncclResult_t r_ = (call);                                                             \
    if (r_ != ncclSuccess && r_ != ncclInProgress)                                        \
      ::vitddp::throw_api_error("NCCL", #call, ncclGetErrorString(r_), __FILE__, __LINE__); \
  } while (0)
