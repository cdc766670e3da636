// The --data device source: synthetic batches written straight into device memory, the same
// values as the host's SyntheticSource (model/synthetic_data.h holds the shared definitions).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "model/synthetic_data.h"

namespace vitddp {

/// The --data device source: writes the synthetic batch of (seed, rank, step) straight into device
/// memory with one kernel on the caller's stream; no host work, no copies. Same values as
/// SyntheticSource (src/data/data.h) for the same (seed, rank, step) and shape, within float rounding.
class DeviceSyntheticSource {
 public:
  /// batch, image_elems (= channels * height * width) and num_classes as in BatchShape
  /// (src/data/data.h); all must be >= 1 and 0 <= rank < 65536, else std::invalid_argument.
  DeviceSyntheticSource(int batch, size_t image_elems, int num_classes, uint64_t seed, int rank);

  /// Enqueues the generation of `step`'s batch on `stream`: d_images float32
  /// [batch, image_elems] and d_labels int32 [batch] are device pointers. Asynchronous; throws
  /// std::runtime_error (CUDA_CHECK) on a launch error and std::invalid_argument when step is
  /// outside [0, 2^47).
  void generate(int64_t step, float* d_images, int32_t* d_labels, cudaStream_t stream) const;

  int batch() const { return batch_; }
  size_t image_elems() const { return image_elems_; }

 private:
  int batch_;
  size_t image_elems_;
  int num_classes_;
  uint64_t seed_;
  int rank_;
};

}  // namespace vitddp
