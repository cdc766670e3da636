// EventPair: two CUDA events that time the work enqueued between their records on one stream
// (cudaEventRecord / cudaEventElapsedTime), owned by the object. Host code; shared by the
// autotuning passes (cuBLASLt candidates, cuDNN plans), the link probe and the GPU tests' timers.
#pragma once
#include <cuda_runtime.h>

#include "cuda/check/check_cuda.h"

namespace vitddp {

/// Two timing events (cudaEventCreate, default flags), destroyed with the object. The constructor
/// throws std::runtime_error (CUDA_CHECK) when an event cannot be created, leaving none behind.
class EventPair {
 public:
  cudaEvent_t start = nullptr, stop = nullptr;

  EventPair() {
    CUDA_CHECK(cudaEventCreate(&start));
    const cudaError_t err = cudaEventCreate(&stop);
    if (err != cudaSuccess) {
      cudaEventDestroy(start);
      CUDA_CHECK(err);
    }
  }
  ~EventPair() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;

  void record_start(cudaStream_t s) { CUDA_CHECK(cudaEventRecord(start, s)); }
  void record_stop(cudaStream_t s) { CUDA_CHECK(cudaEventRecord(stop, s)); }
  /// Milliseconds from the start record to the stop record; waits for the stop record first.
  float elapsed_ms() const {
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    return ms;
  }
};

}  // namespace vitddp
