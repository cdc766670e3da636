// The GPU implementation of the Optimizer (src/engines/optimizer.h): the fused kernels of cuda/kernels/sgd.h and
// cuda/kernels/adamw.h over the device's flat parameter buffer, on the engine's compute stream.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cuda/model/device_buffer.h"
#include "src/engines/optimizer.h"

namespace vitddp {

/// An Optimizer over device buffers. Constructed before the model (its state buffers are
/// allocated where the engine's memory estimate, src/engines/memory_estimate.h, puts them), then bound to
/// the buffers of its updates once they exist. step() enqueues on `stream` (one kernel per
/// segment, plus the bf16 refresh) and returns at once.
class GpuOptimizer : public Optimizer {
 public:
  /// Allocates the state buffers (state_numel fp32 each, named "optimizer state <name>" in an
  /// out-of-memory error) on the current device and zeroes them (cudaMemset, synchronous).
  GpuOptimizer(const OptimizerSpec& spec, size_t state_numel, cudaStream_t stream);

  /// The device buffers of step(): `params` and `grads` (fp32, holding every segment's parameter
  /// and gradient range), `d_skip` (one int: when non-zero at run time, the update leaves every
  /// buffer unchanged - the non-finite skip), `params_bf16` (bf16 at the gradients' flat offsets,
  /// OptimizerSegment::grad_offset: the model's working copy of --precision bf16, rewritten from
  /// the new parameters of every segment by each update, round to nearest even; null for fp32, or
  /// when the caller refreshes it) and the segments to update (empty: one segment {0, 0, 0,
  /// state_numel()}, the whole buffer). Call once, before the first step().
  /// Throws std::invalid_argument as check_segments.
  void bind(float* params, const float* grads, const int* d_skip, __nv_bfloat16* params_bf16,
            std::vector<OptimizerSegment> segments = {});

  std::vector<std::pair<std::string, std::vector<float>>> state() const override;
  void load_state(const TrainState& s) override;

 protected:
  /// Throws std::logic_error when bind() was not called.
  void check_bound() const;

  cudaStream_t stream_;
  std::vector<OptimizerSegment> segments_;
  std::vector<DeviceBuffer<float>> state_;  // state_names()
  float* params_ = nullptr;
  const float* grads_ = nullptr;
  const int* skip_ = nullptr;
  __nv_bfloat16* bf16_ = nullptr;
};

/// The GPU optimizer of optimizer_spec(o) with state buffers of state_numel elements on `stream`
/// (see GpuOptimizer), per segment:
///   SGD:   sgd_step_gpu, which also writes the bf16 working copy in the same pass;
///   AdamW: adamw_step_gpu, then convert_to_bf16 (cuda/kernels/cast.h) of the parameters when bf16.
std::unique_ptr<GpuOptimizer> make_gpu_optimizer(const Options& o, size_t state_numel, cudaStream_t stream);

}  // namespace vitddp
