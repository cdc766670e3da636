// The device side of --optimizer-in-backward: the SGD step applied by backward's weight-gradient
// GEMMs (WeightUpdate) and finished after backward by sgd_rest_after_backward.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <utility>
#include <vector>

#include "cuda/kernels/sgd.h"
#include "cuda/model/device_buffer.h"
#include "model/param_layout.h"
#include "model/sgd.h"

namespace vitddp {

/// The flat element ranges [begin, end) of weights_updated_in_backward(layout), sorted by offset,
/// each end rounded up to the next multiple of 4 (ParamLayout pads every tensor so; the padding
/// stays 0 either way).
std::vector<std::pair<size_t, size_t>> backward_update_ranges(const ParamLayout& layout);

/// Device bytes a BackwardUpdate of `layout` allocates: the two GEMM scalars, one byte per
/// kSgdTile elements and two size_t per range (vit_l_32: 300 KB).
size_t backward_update_map_bytes(const ParamLayout& layout);

/// The buffers of one engine's SGD-in-backward step: the device alpha/beta of
/// linear_update_weight and the BackwardUpdateMap of sgd_rest_after_backward. Allocated and
/// uploaded (synchronously) at construction; throws std::runtime_error on CUDA failure or when out
/// of memory (naming the buffer).
class BackwardUpdate {
 public:
  explicit BackwardUpdate(const ParamLayout& layout);
  /// Enqueues the scalars of `cfg`'s step (write_sgd_gemm_scalars) on `stream`: before each
  /// backward that updates (the CUDA graph reads them from device memory when it replays).
  void set_step(const SgdConfig& cfg, cudaStream_t stream) { write_sgd_gemm_scalars(cfg, scalars_.get(), stream); }
  /// Device alpha and beta (2 floats), for WeightUpdate::alpha_beta.
  const float* alpha_beta() const { return scalars_.get(); }
  const BackwardUpdateMap& map() const { return map_; }
  /// Bytes allocated (backward_update_map_bytes of the layout).
  size_t device_bytes() const;

 private:
  DeviceBuffer<float> scalars_;
  DeviceBuffer<unsigned char> tiles_;
  DeviceBuffer<size_t> bounds_;
  BackwardUpdateMap map_;
};

}  // namespace vitddp
