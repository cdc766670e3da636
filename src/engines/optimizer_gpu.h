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
/// the buffers of its updates once they exist. step() enqueues on `stream` and returns at once.
class GpuOptimizer : public Optimizer {
 public:
  /// Allocates the state buffers (n fp32 each, named "optimizer state <name>" in an out-of-memory
  /// error) on the current device and zeroes them (cudaMemset, synchronous).
  GpuOptimizer(const OptimizerSpec& spec, size_t n, cudaStream_t stream);

  /// The device buffers of step(): `params` (n fp32), `grads` (n fp32), `d_skip` (one int: when
  /// non-zero at run time, the update leaves every buffer unchanged - the non-finite skip) and
  /// `params_bf16` (n bf16: the model's working copy of --precision bf16, rewritten from the new
  /// parameters by every update; null for fp32). Call once, before the first step().
  void bind(float* params, const float* grads, const int* d_skip, __nv_bfloat16* params_bf16);

  std::vector<std::pair<std::string, std::vector<float>>> state() const override;
  void load_state(const TrainState& s) override;

 protected:
  /// Throws std::logic_error when bind() was not called.
  void check_bound() const;

  size_t n_;
  cudaStream_t stream_;
  std::vector<DeviceBuffer<float>> state_;  // state_names()
  float* params_ = nullptr;
  const float* grads_ = nullptr;
  const int* skip_ = nullptr;
  __nv_bfloat16* bf16_ = nullptr;
};

/// The GPU optimizer of optimizer_spec(o) with n elements on `stream` (see GpuOptimizer):
///   SGD:   sgd_step_gpu, which also writes the bf16 working copy in the same pass;
///   AdamW: adamw_step_gpu, then convert_to_bf16 (cuda/kernels/cast.h) of the parameters when bf16.
std::unique_ptr<GpuOptimizer> make_gpu_optimizer(const Options& o, size_t n, cudaStream_t stream);

}  // namespace vitddp
