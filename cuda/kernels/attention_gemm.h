// The attention core of fp32 activations (--precision fp32 and tf32) as batched GEMMs: the "math"
// form of torch.nn.functional.scaled_dot_product_attention, for the sequences the tensor-core
// kernels do not take (vit_b_16, vit_l_16: 197 tokens; vit_h_14: 257).
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>

namespace vitddp {

/// softmax(Q K^T / sqrt(dh)) V over the packed layout of cuda/kernels/attention.h (qkv [B*T, 3D],
/// out [B*T, D], probs [B, H, T, T] row-major, dqkv [B*T, 3D]; D = H*dh), with one cuBLAS
/// cublasGemmBatchedEx per product, one batch entry per (batch, head): its pointer arrays point
/// into the packed buffers (leading dimensions 3D and D), so no head is copied out. Forward:
/// S = Q K^T / sqrt(dh) into probs, a row softmax in place (fp32, exact expf), O = P V into out.
/// Backward: dV = P^T dO, dP = dO V^T into `dscores`, dS = P * (dP - rowsum(P * dP)) in place,
/// dQ = dS K / sqrt(dh), dK = dS^T Q / sqrt(dh), written (overwritten) into dqkv.
/// Every product has fp32 operands and output and the compute type given at construction:
/// CUBLAS_COMPUTE_32F or _32F_PEDANTIC is strict fp32; CUBLAS_COMPUTE_32F_FAST_TF32 lets cuBLAS
/// round the operands of a product, P and dS included, to TF32 inside the tensor cores (what
/// PyTorch's math SDPA does under torch.backends.cuda.matmul.allow_tf32), fp32 accumulation; it
/// keeps an fp32 kernel where its heuristic prefers one (on an H200: every product at T = 70 with
/// head_dim 80, the scores at T = 197).
/// Deterministic: cuBLAS's batched GEMMs on one stream, no atomics. Limits: 1 <= T <= 512 (the
/// softmax keeps a row in registers), 1 <= dh, B*H >= 1. Bad shapes throw std::invalid_argument;
/// cuBLAS and CUDA failures throw std::runtime_error. Graph-capturable: the pointer arrays are
/// written by a kernel on the stream into caller scratch before each call's GEMMs.
class GemmAttention {
 public:
  /// A cuBLAS handle on `stream` using `workspace` (workspace_bytes; may be null with 0: the
  /// LtGemm workspace of the same stream, LtGemm::workspace) for every product.
  GemmAttention(cudaStream_t stream, cublasComputeType_t compute, void* workspace, size_t workspace_bytes);
  ~GemmAttention();
  GemmAttention(const GemmAttention&) = delete;
  GemmAttention& operator=(const GemmAttention&) = delete;

  /// Floats of scratch (8-byte aligned) a forward or backward call needs for its pointer arrays:
  /// 12 device pointers per (batch, head) pair.
  static size_t pointer_scratch_floats(int batch, int heads);

  /// Writes probs and out; `scratch`: pointer_scratch_floats(batch, heads) floats.
  void forward(const float* qkv, float* probs, float* out, int batch, int T, int heads, int head_dim,
               float* scratch);
  /// Writes dqkv; dscores: [B, H, T, T] fp32 (attention_backward_scratch_floats); `scratch` as in
  /// forward. probs must be forward's.
  void backward(const float* qkv, const float* probs, const float* dout, float* dqkv, float* dscores, int batch,
                int T, int heads, int head_dim, float* scratch);

 private:
  cudaStream_t stream_;
  cublasComputeType_t compute_;
  cublasHandle_t handle_ = nullptr;
};

}  // namespace vitddp
