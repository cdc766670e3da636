// A named list of device allocations owned by one object (GpuViT, LtGemm): each buffer is a
// DeviceBuffer, so an out-of-memory error names the buffer and its size; all are freed together.
#pragma once
#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "cuda/model/device_buffer.h"

namespace vitddp {

/// Owner of many DeviceBuffers; pointers it hands out stay valid until it is destroyed.
class DeviceArena {
 public:
  /// cudaMalloc of `count` elements of T (at least one, so the pointer is never null); throws
  /// std::runtime_error naming `name` and the bytes on failure (see DeviceBuffer).
  template <typename T>
  T* alloc(size_t count, const std::string& name) {
    const size_t bytes = std::max<size_t>(count, 1) * sizeof(T);
    bufs_.emplace_back(bytes, name);
    bytes_ += bytes;
    return reinterpret_cast<T*>(bufs_.back().get());
  }
  /// Total bytes allocated.
  size_t bytes() const { return bytes_; }

 private:
  std::vector<DeviceBuffer<char>> bufs_;
  size_t bytes_ = 0;
};

}  // namespace vitddp
