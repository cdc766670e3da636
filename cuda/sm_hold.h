// Holding SMs on purpose: a stand-in for another stream's kernels (NCCL's all-reduce during
// backward) when GEMMs are autotuned for, or benchmarked against, fewer free SMs.
#pragma once
#include <cuda_runtime.h>

namespace vitddp {

/// Occupies `blocks` SMs of the current device with one spinning thread block each, until
/// release(). Each block asks for more than half an SM's shared memory, so no two of them share
/// an SM and no thread block that needs shared memory (a cuBLASLt GEMM's) fits beside one; they
/// move no data. start() returns once every block is resident (or after 1 s, if the device cannot
/// host them all at once, e.g. because other kernels hold SMs). A block that is never released
/// ends by itself after about 10 s of SM clock.
///
/// Not thread-safe; one hold at a time per object. Errors (CUDA) throw std::runtime_error
/// (cuda/check.h); start() with blocks outside [1, SM count - 1] throws std::invalid_argument.
class SmHold {
 public:
  SmHold();  ///< allocates the host-mapped flags and the high-priority stream the blocks run on
  ~SmHold();  ///< releases a running hold and waits for it
  SmHold(const SmHold&) = delete;
  SmHold& operator=(const SmHold&) = delete;

  /// Launches the holding blocks and waits until they are all resident.
  void start(int blocks);
  /// Lets the blocks exit and waits for them (no-op when nothing is held).
  void release();
  /// The device's SM count (cudaDevAttrMultiProcessorCount).
  int device_sms() const { return sms_; }

 private:
  cudaStream_t stream_ = nullptr;
  volatile int* flags_ = nullptr;  ///< host-mapped: [0] blocks started, [1] release
  int* flags_dev_ = nullptr;
  int sms_ = 0, smem_bytes_ = 0;
  long long cap_cycles_ = 0;
  bool holding_ = false;
};

}  // namespace vitddp
