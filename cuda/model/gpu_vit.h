// GPU ViT forward/backward in fp32, TF32 or bf16 mixed precision: cuBLASLt GEMMs + custom kernels.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "model/grad_ready.h"
#include "model/gpu_vit_options.h"
#include "model/params_needed.h"
#include "model/kernel_choice.h"
#include "model/param_layout.h"
#include "model/precision.h"

namespace vitddp {

struct TimedGemm;  // cuda/kernels/lt_gemm.h

/// The SGD step fused into backward (PyTorch's optimizer-in-backward pattern, here inside the
/// weight-gradient GEMMs): each tensor of weights_updated_in_backward(layout) is updated in place
/// by its weight-gradient GEMM, W = beta * W + alpha * dW with alpha = alpha_beta[0] and beta =
/// alpha_beta[1] read on the device when the GEMM runs (linear_update_weight; SGD: -lr and 1, as
/// --optimizer-in-backward refuses weight decay), and its gradient is not written. `params` is the
/// d_params of the call.
struct WeightUpdate {
  float* params = nullptr;            ///< nullptr: no update, every gradient is written
  const float* alpha_beta = nullptr;  ///< device, 2 floats
};

/// The same computation as CpuViT (torchvision VisionTransformer, dropout 0, mean cross-entropy),
/// on one GPU, every kernel and GEMM enqueued on `stream`. forward() also computes dLoss/dlogits,
/// so backward() needs no labels. No host synchronisation inside forward/backward except the
/// one-off GEMM autotuning of GpuViTOptions. Owns its activation buffers (one device allocation,
/// laid out by plan_gpu_vit_arena), cuBLASLt handle and workspace; parameters and gradients are caller-owned flat fp32 device buffers laid out by
/// ParamLayout, in every precision.
///
/// Precisions (GpuViTOptions::precision):
///  - fp32: strict fp32 (cuBLASLt CUBLAS_COMPUTE_32F_PEDANTIC, fp32 operands, no TF32).
///    vit_l_32, batch 32 on an H200: about 25.6 ms forward + 47.2 ms backward (2.6 GiB of
///    activations; 2.0 with recompute_gelu, the trainer's fp32 default).
///  - tf32: identical except that every GEMM runs with CUBLAS_COMPUTE_32F_FAST_TF32, and the
///    attention core on TF32 tensor cores for T <= 64, head_dim 64 (cuda/kernels/attention_mma.h).
///  - bf16 (torch.autocast(dtype=torch.bfloat16) semantics): a bf16 working copy of the
///    parameters (bf16_weights()) feeds every nn.Linear / conv GEMM; GEMM operands (LayerNorm
///    outputs, im2col patches, qkv, attention output, GELU input and output, the gradients
///    flowing into GEMMs) are stored in bf16; GEMMs accumulate in fp32 (CUBLAS_COMPUTE_32F).
///    The bf16-output GEMMs (in_proj, mlp.0) add their bf16 bias, as autocast does.
///    Kept in fp32: the residual stream x (GEMMs that add into it write fp32 with the fp32 bias),
///    LayerNorm statistics, softmax probabilities, the head (final LayerNorm output, logits,
///    loss), the residual-stream gradient (plus a bf16 copy for the GEMMs), and every parameter
///    gradient, written in fp32 straight into d_grads by the weight-gradient GEMMs (fp32 C/D).
///    GELU stays the exact erf form (cuBLASLt's GELU epilogue is the tanh approximation).
///    The tests hold logits, loss and every gradient tensor within 3e-2 norm-relative of the
///    fp32 CPU reference (tf32: 5e-3).
///
/// Errors: CUDA / cuBLASLt / cuDNN failures throw std::runtime_error with file and line
/// (cuda/check/check_cuda.h). Out-of-memory names the buffer and the bytes requested. With a cuDNN
/// implementation selected, the constructor builds its graphs / algorithms for max_batch, so a
/// shape that the installed cuDNN cannot run fails there, naming the operation and cuDNN's message.
class GpuViT {
 public:
  GpuViT(const ParamLayout& layout, int max_batch, cudaStream_t stream,
         const GpuViTOptions& options = GpuViTOptions());
  ~GpuViT();
  GpuViT(const GpuViT&) = delete;
  GpuViT& operator=(const GpuViT&) = delete;

  /// Enqueues forward + loss. d_images [batch, C, H, W] fp32, d_labels [batch] int32 (device).
  /// Writes the mean cross-entropy to *d_loss (device float). batch <= max_batch. When given,
  /// `before` is called on the host right before the work reading each group of parameters is
  /// enqueued (groups and order in model/params_needed.h; all of them first when forward() itself
  /// refreshes the bf16 copy, GpuViTOptions::refresh_bf16_weights), so the caller can order that
  /// work after the parameters' producer, block by block.
  void forward(const float* d_params, const float* d_images, const int32_t* d_labels, int batch,
               float* d_loss, const ParamsNeededFn& before = {});

  /// Enqueues backward of the last forward: writes (accumulate=false) or adds dLoss/dparams into
  /// d_grads; calls `on_ready` on the host after enqueuing the kernels that finalise each group
  /// (order in grad_ready.h), so the caller can record an event on `stream` right then. With
  /// update.params (accumulate must be false; throws std::invalid_argument otherwise), the tensors
  /// of weights_updated_in_backward are updated instead of their gradients written; each one's
  /// input-gradient GEMM, which reads it, runs before its update.
  void backward(const float* d_params, float* d_grads, bool accumulate, const GradReadyFn& on_ready,
                const WeightUpdate& update = {});

  /// With GpuViTOptions::overlay_gradients: the flat fp32 gradient buffer (layout.total values,
  /// ParamLayout offsets) placed inside the activation memory; nullptr otherwise.
  float* gradients() const;

  /// Device pointer to the logits of the last forward, [batch, num_classes] row-major fp32.
  const float* logits() const;

  /// Bytes of device memory this object allocated: the activation arena (one allocation of
  /// plan_gpu_vit_arena(...).total_bytes, cuda/model/gpu_vit_arena.h: activations, scratch, the bf16
  /// weight copy) plus the cuBLASLt and cuDNN workspaces (workspace_bytes()). Not counted: the
  /// transient cuBLASLt autotuning output of a weight gradient accumulated in place, while its
  /// GEMM is first timed (gpu_vit_autotune_scratch_bytes).
  size_t device_bytes() const;
  /// Of which the cuDNN attention graphs' and convolution's workspaces and buffers (sized by
  /// cuDNN when the graphs are built, so not in the memory estimate); 0 without cuDNN paths.
  size_t cudnn_bytes() const;

  /// Bytes of the cuBLASLt workspace a GpuViT built with `options` allocates (no CUDA call).
  static size_t workspace_bytes(const GpuViTOptions& options);

  /// The precision this model computes in.
  Precision precision() const;

  /// bf16: the working copy of the parameters (layout.total bf16 values at the same offsets as
  /// the fp32 buffer), refreshed by forward() unless GpuViTOptions::refresh_bf16_weights is
  /// false. nullptr in fp32 and tf32.
  __nv_bfloat16* bf16_weights() const;

  /// Benchmarks: while on, every GEMM is bracketed by CUDA events (slightly perturbs timing).
  void set_gemm_timing(bool on);
  /// GPU milliseconds spent in GEMMs enqueued with timing on since the last call (waits for them).
  double take_gemm_ms();
  /// The same GEMMs one by one (LtGemm::take_timed_calls): shape, algorithm, in-step and autotuned times.
  std::vector<TimedGemm> take_gemm_calls();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vitddp
