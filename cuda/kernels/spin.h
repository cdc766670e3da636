// A kernel that only waits: a stand-in for other work on a stream.
#pragma once
#include <cuda_runtime.h>

namespace vitddp {

/// Enqueues `blocks` thread blocks of `threads` threads on `stream`, each spinning until `cycles`
/// SM clock cycles (clock64) have passed: a stand-in for another stream's kernels holding SMs
/// (cuBLASLt autotuning under an SM count target), something for later launches to queue behind
/// while they are timed, or (tests) a delay that makes one stream's work run after another's.
/// cycles <= 0 enqueues nothing. Throws std::runtime_error if the launch fails.
void spin_cycles(long long cycles, int blocks, int threads, cudaStream_t stream);

}  // namespace vitddp
