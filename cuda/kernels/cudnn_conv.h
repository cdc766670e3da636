// Patch embedding convolution (torchvision ViT's conv_proj: C -> D channels, kernel = stride =
// patch) through cuDNN's convolution API, forward and weight gradient, in fp32, TF32 or bf16, on a
// stream. The alternative to cuda/kernels/patch_embed.h's im2col + cuBLASLt GEMM.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <memory>

#include "cuda/kernels/patch_embed.h"
#include "model/precision.h"

namespace vitddp {

/// conv_proj = nn.Conv2d(C, D, kernel_size=P, stride=P) (cross-correlation, no padding) with
/// cudnnConvolutionForward / cudnnConvolutionBackwardFilter:
///  - images: [B, C, H, W] fp32 NCHW (the model's input; it needs no gradient);
///  - weight: [D, C, P, P] fp32 (torch layout; the same memory as the GEMM path's [D, C*P*P]),
///    bias: [D] fp32;
///  - emb: [B*Np, D] fp32 row-major, row b*Np + i*grid + j = output pixel (i, j) of image b: the
///    convolution's output is written as an NHWC tensor [B, grid, grid, D], which is exactly the
///    layout the GEMM path produces, so assemble_tokens is unchanged.
/// Precisions (the object's, fixed at construction):
///  - fp32: fp32 operands, CUDNN_FMA_MATH (no TF32, no tensor cores): strict fp32 like
///    CUBLAS_COMPUTE_32F_PEDANTIC. Only algorithms that report no tensor-core math are used.
///  - tf32: fp32 operands, CUDNN_DEFAULT_MATH (TF32 tensor cores allowed, fp32 accumulation).
///  - bf16 (torch.autocast semantics for conv2d): the images are rounded to bf16, the weight is
///    the bf16 working copy; the
///    convolution accumulates in fp32 and writes bf16 (cuDNN's PSEUDO_BFLOAT16 configuration, as
///    autocast's conv2d output), then emb = fp32(y) + bias (fp32). The weight gradient is computed
///    in bf16 (fp32 accumulation, rounded to bf16, as autocast's conv2d backward) and widened
///    into the fp32 gradient.
/// forward() keeps its own copy of the images (fp32, or rounded to bf16) for backward_weight(), so
/// the caller's image buffer may be refilled as soon as forward() is enqueued (as the GEMM path's
/// im2col buffer allows). The bias gradient is not computed here: it is the column sum of demb
/// (cuda/kernels/reduce.h).
///
/// Algorithms: per batch size, chosen once (on first use or by prepare()) from cuDNN's heuristics
/// (cudnnGetConvolution*Algorithm_v7), or, when `autotune`, by timing them
/// (cudnnFindConvolution*Algorithm: synchronises the device once per new batch size). The weight
/// gradient prefers deterministic algorithms. Where no algorithm writes the NHWC output view
/// directly, the convolution writes NCHW into scratch and cudnnTransformTensor reorders it (and
/// demb is reordered to NCHW for the weight gradient). Workspace and scratch are device buffers
/// owned by the object, grown when a plan needs more (the stream is synchronised first).
///
/// Errors: cuDNN / CUDA failures throw std::runtime_error naming the call and cuDNN's message;
/// a batch outside [1, max batch], or an overload that does not match the precision, throws
/// std::invalid_argument.
class CudnnPatchEmbed {
 public:
  /// `g`: geometry with the largest batch that will be used. Creates a cuDNN handle on `stream`,
  /// the image copy for g.batch images and (bf16) the bf16 output and weight-gradient buffers.
  CudnnPatchEmbed(const PatchGeometry& g, Precision precision, cudaStream_t stream,
                  bool autotune = false);
  ~CudnnPatchEmbed();
  CudnnPatchEmbed(const CudnnPatchEmbed&) = delete;
  CudnnPatchEmbed& operator=(const CudnnPatchEmbed&) = delete;

  /// Chooses the algorithms for `batch` images now (and grows the workspace), so that a
  /// configuration cuDNN cannot run fails at set-up.
  void prepare(int batch);

  /// fp32 / tf32 forward: emb = conv(images, weight) + bias for `batch` images.
  void forward(const float* images, const float* weight, const float* bias, float* emb, int batch);
  /// bf16 forward: weight16 is the bf16 copy of the weight.
  void forward(const float* images, const __nv_bfloat16* weight16, const float* bias, float* emb,
               int batch);

  /// Weight gradient of the last forward (`batch` must be its batch): dw [D, C, P, P] fp32 =
  /// (accumulate ? dw : 0) + sum over images and output pixels of demb x image patch. demb:
  /// [B*Np, D] row-major, fp32 (fp32 / tf32) or bf16 (bf16).
  void backward_weight(const float* demb, float* dw, bool accumulate, int batch);
  void backward_weight(const __nv_bfloat16* demb, float* dw, bool accumulate, int batch);

  /// Device bytes held (workspace, image copy, bf16 buffers, scratch).
  size_t device_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vitddp
