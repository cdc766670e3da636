// GPU ViT forward/backward in strict fp32: cuBLASLt GEMMs + custom kernels.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "model/grad_ready.h"
#include "model/param_layout.h"

namespace vitddp {

/// Tuning knobs of GpuViT (the defaults are what the trainer should use).
struct GpuViTOptions {
  /// cuBLASLt algorithm choice for each GEMM shape. 0: cuBLASLt's first heuristic choice (no
  /// synchronisation, the same algorithm in every process). n > 1: at the first use of each shape
  /// (the first forward/backward, and the first with a new batch size) time up to n candidates and
  /// keep the fastest: one stream synchronisation per new shape, about 2% faster on vit_l_32, but
  /// the choice (hence the last bits of the results) may differ between processes.
  int gemm_autotune_candidates = 16;
  /// Bias gradients of nn.Linear layers from the weight-gradient GEMM's epilogue (cuBLASLt
  /// BGRADB) when backward overwrites; otherwise (and when accumulating) by a separate
  /// deterministic column-sum kernel.
  bool fused_bias_grad = true;
};

/// The same computation as CpuViT (torchvision VisionTransformer, dropout 0, mean cross-entropy),
/// on one GPU, in strict fp32 (no TF32: cuBLASLt compute type CUBLAS_COMPUTE_32F_PEDANTIC,
/// fp32 operands), every kernel and GEMM enqueued on `stream`. forward() also computes
/// dLoss/dlogits, so backward() needs no labels. No host synchronisation inside forward/backward
/// except the one-off GEMM autotuning of GpuViTOptions. vit_l_32, batch 32 on an H200: about
/// 25.6 ms forward + 47.2 ms backward (2.6 GiB of activations). Owns its activation buffers,
/// cuBLASLt handle and workspace; parameters and gradients are caller-owned flat device buffers
/// laid out by ParamLayout.
///
/// Errors: CUDA / cuBLASLt failures throw std::runtime_error with file and line
/// (cuda/check.h). Out-of-memory names the buffer and the bytes requested.
class GpuViT {
 public:
  GpuViT(const ParamLayout& layout, int max_batch, cudaStream_t stream,
         const GpuViTOptions& options = GpuViTOptions());
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
