// GPU ViT forward/backward in strict fp32: cuBLASLt GEMMs + custom kernels.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "model/grad_ready.h"
#include "model/param_layout.h"

namespace vitddp {

/// The same computation as CpuViT (torchvision VisionTransformer, dropout 0, mean cross-entropy),
/// on one GPU, in strict fp32 (no TF32: cuBLASLt compute type CUBLAS_COMPUTE_32F with
/// pedantic math), every kernel and GEMM enqueued on `stream`. Owns its activation buffers,
/// cuBLASLt handle and workspace; parameters and gradients are caller-owned flat device buffers
/// laid out by ParamLayout.
///
/// Errors: CUDA / cuBLASLt failures throw std::runtime_error with file and line
/// (cuda/check.h). Out-of-memory names the buffer and the bytes requested.
class GpuViT {
 public:
  GpuViT(const ParamLayout& layout, int max_batch, cudaStream_t stream);
  ~GpuViT();
  GpuViT(const GpuViT&) = delete;
  GpuViT& operator=(const GpuViT&) = delete;

  /// Enqueues forward + loss. d_images [batch, C, H, W] fp32, d_labels [batch] int32 (device).
  /// Writes the mean cross-entropy to *d_loss (device float). batch <= max_batch.
  void forward(const float* d_params, const float* d_images, const int32_t* d_labels, int batch,
               float* d_loss);

  /// Enqueues backward of the last forward: writes (accumulate=false) or adds dLoss/dparams into
  /// d_grads; calls `on_ready` on the host after enqueuing the kernels that finalise each group
  /// (order in grad_ready.h), so the caller can record an event on `stream` right then.
  void backward(const float* d_params, float* d_grads, bool accumulate, const GradReadyFn& on_ready);

  /// Device pointer to the logits of the last forward, [batch, num_classes] row-major fp32.
  const float* logits() const;

  /// Bytes of device memory this object allocated (activations + workspace).
  size_t device_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vitddp
