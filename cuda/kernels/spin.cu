#include "cuda/kernels/spin.h"

#include "cuda/check/check_cuda.h"

namespace vitddp {

namespace {
__global__ void spin_kernel(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}
}  // namespace

void spin_cycles(long long cycles, int blocks, int threads, cudaStream_t stream) {
  if (cycles <= 0) return;
  spin_kernel<<<blocks, threads, 0, stream>>>(cycles);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace vitddp
