// Patch embedding of torchvision's ViT (conv_proj with stride = kernel = patch, class token,
// positional embedding) as im2col + GEMM + token assembly, fp32 (GEMM operands optionally bf16),
// on a stream.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace vitddp {

/// Geometry of the patch embedding.
struct PatchGeometry {
  int batch = 0;     ///< B
  int channels = 0;  ///< C
  int image = 0;     ///< H = W
  int patch = 0;     ///< P (H divisible by P)
  int hidden = 0;    ///< D
  int grid() const { return image / patch; }
  int num_patches() const { return grid() * grid(); }  ///< Np
  int seq_len() const { return num_patches() + 1; }     ///< T
  int patch_dim() const { return channels * patch * patch; }
};

/// im2col: patches[b*Np + p, c*P*P + kh*P + kw] = images[b, c, i*P+kh, j*P+kw], p = i*grid + j.
/// images: [B, C, H, W] fp32 NCHW; patches: [B*Np, C*P*P] row-major. The convolution is then
/// emb = patches @ conv_w^T + conv_b with conv_w viewed as [D, C*P*P].
/// The bf16 overload rounds every value to bf16 (the GEMM operand of autocast's conv_proj).
void patch_im2col(const float* images, float* patches, const PatchGeometry& g, cudaStream_t stream);
void patch_im2col(const float* images, __nv_bfloat16* patches, const PatchGeometry& g,
                  cudaStream_t stream);

/// Token sequence: h[b, 0, :] = class_token + pos[0, :], h[b, 1+p, :] = emb[b*Np + p, :] + pos[1+p, :].
/// emb: [B*Np, D]; class_token: [D]; pos: [T, D]; h: [B*T, D].
void assemble_tokens(const float* emb, const float* class_token, const float* pos, float* h,
                     const PatchGeometry& g, cudaStream_t stream);

/// Backward of assemble_tokens given dh [B*T, D]:
///   dpos[t, :] (+)= sum_b dh[b, t, :];  dclass[:] (+)= sum_b dh[b, 0, :];
///   demb[b*Np + p, :] = dh[b, 1+p, :].
/// '+=' when accumulate, '=' otherwise (demb is always overwritten). Sums over b in fixed order.
/// The bf16 overload writes demb rounded to bf16 (the operand of conv_proj's weight-gradient
/// GEMM); dclass and dpos are fp32 sums in both.
void assemble_tokens_backward(const float* dh, float* demb, float* dclass, float* dpos,
                              bool accumulate, const PatchGeometry& g, cudaStream_t stream);
void assemble_tokens_backward(const float* dh, __nv_bfloat16* demb, float* dclass, float* dpos,
                              bool accumulate, const PatchGeometry& g, cudaStream_t stream);

}  // namespace vitddp
