// CK(call): the standalone diagnostics' CUDA runtime check (they link none of vitddp's libraries):
// on an error, the call, file, line and message to stderr, then exit(1).
#pragma once
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CK(x)                                                                                \
  do {                                                                                       \
    cudaError_t err_ = (x);                                                                  \
    if (err_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(err_)); \
      std::exit(1);                                                                          \
    }                                                                                        \
  } while (0)
