// An owning, move-only device allocation whose out-of-memory error says what it was for.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

#include "cuda/check/api_error.h"

namespace vitddp {

/// `count` elements of T in device memory (cudaMalloc). Throws std::runtime_error naming `what`,
/// the bytes requested and the device's free memory when the allocation fails.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(size_t count, const std::string& what) : n_(count) {
    if (count == 0) return;
    const cudaError_t e = cudaMalloc(reinterpret_cast<void**>(&p_), count * sizeof(T));
    if (e != cudaSuccess) {
      cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      throw std::runtime_error(launcher_rank_label() + ": out of GPU memory allocating " + what + " (" +
                               std::to_string(count * sizeof(T) >> 20) + " MiB; " + std::to_string(free_b >> 20) +
                               " MiB free of " + std::to_string(total_b >> 20) + " MiB): " + cudaGetErrorString(e));
    }
  }
  ~DeviceBuffer() {
    if (p_) cudaFree(p_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      if (p_) cudaFree(p_);
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace vitddp
