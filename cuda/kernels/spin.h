// Kernels that only wait: a stand-in for other work on a stream, and a gate the host opens.
#pragma once
#include <cuda_runtime.h>

namespace vitddp {

/// Enqueues `blocks` thread blocks of `threads` threads on `stream`, each spinning until `cycles`
/// SM clock cycles (clock64) have passed: a stand-in for another stream's kernels holding SMs
/// (cuBLASLt autotuning under an SM count target), something for timed launches to queue behind
/// where a HostGate cannot be used, or (tests) a delay that makes one stream's work run after
/// another's. cycles <= 0 enqueues nothing. Throws std::runtime_error if the launch fails.
void spin_cycles(long long cycles, int blocks, int threads, cudaStream_t stream);

/// A one-thread kernel that holds a stream until the host opens the gate: the launches enqueued
/// behind it start back to back once it opens, so events around them time the GPU's work and not
/// the host's launch rate (nvbench's "blocking kernel" does this for the same reason; it matters
/// where launches are slow: a profiler that intercepts every launch, a busy host). The flag is
/// one int of mapped pinned host memory that the kernel reads with volatile loads. So that a
/// gate never opened (a host that throws between close and open, or launches that wait for the
/// kernel to end: CUDA_LAUNCH_BLOCKING=1, a profiler replaying each kernel) cannot hang the stream,
/// the kernel gives up after `max_cycles` SM clock cycles and records that it did (timed_out).
/// Not copyable. One close/open pair at a time: call close() again only once the stream has passed
/// the previous gate (synchronised), or its kernel may still be reading the flags close() resets.
/// The destructor opens the gate before freeing the flags. Throws std::runtime_error on a CUDA
/// error, std::invalid_argument for max_cycles < 1.
class HostGate {
 public:
  /// Allocates the flags (cudaHostAllocMapped). max_cycles >= 1.
  explicit HostGate(long long max_cycles);
  ~HostGate();
  HostGate(const HostGate&) = delete;
  HostGate& operator=(const HostGate&) = delete;

  /// Closes the gate and enqueues the waiting kernel on `stream`.
  void close(cudaStream_t stream);
  /// Opens the gate (a host store the waiting kernel sees).
  void open() noexcept;
  /// After the stream has passed the gate (synchronise first): whether the kernel stopped
  /// waiting at max_cycles instead of at open().
  bool timed_out() const;

 private:
  volatile int* flags_ = nullptr;  // [0]: open, [1]: timed out
  int* device_flags_ = nullptr;    // the same memory as the device sees it
  long long max_cycles_ = 0;
};

}  // namespace vitddp
