#include "cuda/kernels/spin.h"

#include <stdexcept>

#include "cuda/check/check_cuda.h"

namespace vitddp {

namespace {
__global__ void spin_kernel(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

// flags[0]: set to 1 by the host to open; flags[1]: written 1 when max_cycles passed first. The
// limit is checked before the flag, so max_cycles = 1 times out even when the host opened first.
__global__ void gate_kernel(volatile int* flags, long long max_cycles) {
  const long long start = clock64();
  while (true) {
    if (clock64() - start >= max_cycles) {
      flags[1] = 1;
      return;
    }
    if (flags[0] != 0) return;
  }
}
}  // namespace

void spin_cycles(long long cycles, int blocks, int threads, cudaStream_t stream) {
  if (cycles <= 0) return;
  spin_kernel<<<blocks, threads, 0, stream>>>(cycles);
  CUDA_CHECK(cudaGetLastError());
}

HostGate::HostGate(long long max_cycles) : max_cycles_(max_cycles) {
  if (max_cycles < 1) throw std::invalid_argument("HostGate: max_cycles must be >= 1");
  void* p = nullptr;
  CUDA_CHECK(cudaHostAlloc(&p, 2 * sizeof(int), cudaHostAllocMapped));
  flags_ = static_cast<volatile int*>(p);
  flags_[0] = 1;
  flags_[1] = 0;
  void* dev = nullptr;
  const cudaError_t err = cudaHostGetDevicePointer(&dev, p, 0);
  if (err != cudaSuccess) cudaFreeHost(p);
  CUDA_CHECK(err);
  device_flags_ = static_cast<int*>(dev);
}

HostGate::~HostGate() {
  if (!flags_) return;
  flags_[0] = 1;                           // a kernel still waiting (the caller did not synchronise) stops reading;
  cudaFreeHost(const_cast<int*>(flags_));  // cudaFreeHost synchronises the device before freeing
}

void HostGate::close(cudaStream_t stream) {
  flags_[0] = 0;
  flags_[1] = 0;
  gate_kernel<<<1, 1, 0, stream>>>(device_flags_, max_cycles_);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) flags_[0] = 1;
  CUDA_CHECK(err);
}

void HostGate::open() noexcept { flags_[0] = 1; }

bool HostGate::timed_out() const { return flags_[1] != 0; }

}  // namespace vitddp
