#include "cuda/sm_hold.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

#include "cuda/check.h"

namespace vitddp {
namespace {

// One block per SM (forced by its dynamic shared memory): counts itself in flags[0], then spins
// until the host sets flags[1] or `cap_cycles` SM clock cycles have passed.
__global__ void hold_kernel(int* flags, long long cap_cycles) {
  extern __shared__ char reserve[];
  if (threadIdx.x != 0) return;
  reserve[0] = 0;
  atomicAdd_system(&flags[0], 1);
  const long long start = clock64();
  volatile int* release = &flags[1];
  while (*release == 0 && clock64() - start < cap_cycles) {
  }
}

}  // namespace

SmHold::SmHold() {
  int dev = 0, clock_khz = 0, smem_sm = 0, smem_optin = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  smem_bytes_ = std::min(smem_optin, smem_sm / 2 + 1024);
  CUDA_CHECK(cudaFuncSetAttribute(hold_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes_));
  cap_cycles_ = (long long)clock_khz * 10000;  // ~10 s at the peak clock
  int lo = 0, hi = 0;
  CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
  CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, hi));
  int* host = nullptr;
  const cudaError_t e = cudaHostAlloc(reinterpret_cast<void**>(&host), 2 * sizeof(int), cudaHostAllocMapped);
  if (e != cudaSuccess) cudaStreamDestroy(stream_);
  CUDA_CHECK(e);
  flags_ = host;
  CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&flags_dev_), host, 0));
}

SmHold::~SmHold() {
  if (holding_) {
    flags_[1] = 1;
    cudaStreamSynchronize(stream_);
  }
  cudaFreeHost(const_cast<int*>(flags_));
  cudaStreamDestroy(stream_);
}

void SmHold::start(int blocks) {
  if (blocks < 1 || blocks >= sms_)
    throw std::invalid_argument("SmHold: " + std::to_string(blocks) + " blocks outside [1, " +
                                std::to_string(sms_ - 1) + "] on a GPU with " + std::to_string(sms_) + " SMs");
  release();
  flags_[0] = 0;
  flags_[1] = 0;
  hold_kernel<<<blocks, 32, smem_bytes_, stream_>>>(flags_dev_, cap_cycles_);
  CUDA_CHECK(cudaGetLastError());
  holding_ = true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (flags_[0] < blocks && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
}

void SmHold::release() {
  if (!holding_) return;
  flags_[1] = 1;
  holding_ = false;
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

}  // namespace vitddp
