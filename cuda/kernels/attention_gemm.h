// The attention core of fp32 activations (--precision fp32 and tf32) as batched GEMMs: the "math"
// form of torch.nn.functional.scaled_dot_product_attention, for the sequences the tensor-core
// kernels do not take (vit_b_16, vit_l_16: 197 tokens; vit_h_14: 257).
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>

namespace vitddp {

/// softmax(Q K^T / sqrt(dh)) V over the packed layout of cuda/kernels/attention.h (qkv [B*T, 3D],
/// out [B*T, D], dqkv [B*T, 3D]; D = H*dh), with one cuBLAS cublasGemmBatchedEx per product, one
/// batch entry per (batch, head): its pointer arrays point into the packed buffers (leading
/// dimensions 3D and D), so no head is copied out. The probabilities and the score gradient are
/// [B, H, T, ldp] row-major with ldp = probs_ld(T) = T rounded up to 4 floats, so every row and
/// every (batch, head) matrix starts 16-byte aligned; columns T..ldp-1 are never read or written.
/// (Measured on an H100, results/h100/attention-gemm: the padding changed neither the speed, within
/// 0.2%, nor cuBLAS's choice of fp32 kernels for the scores at T = 197 and 257 in the tests' shapes.)
/// Forward: S = Q K^T / sqrt(dh) into probs, a row softmax in place (fp32, exact expf), O = P V
/// into out. Backward: dV = P^T dO, dP = dO V^T into `dscores`, dS = P * (dP - rowsum(P * dP)) in
/// place, dQ = dS K / sqrt(dh), dK = dS^T Q / sqrt(dh), written (overwritten) into dqkv.
/// Every product has fp32 operands and output and the compute type given at construction:
/// CUBLAS_COMPUTE_32F or _32F_PEDANTIC is strict fp32; CUBLAS_COMPUTE_32F_FAST_TF32 lets cuBLAS
/// round the operands of a product, P and dS included, to TF32 inside the tensor cores (what
/// PyTorch's math SDPA does under torch.backends.cuda.matmul.allow_tf32), fp32 accumulation; it
/// keeps an fp32 kernel where its heuristic prefers one (in the tests' shapes: every product at
/// T = 70 with head_dim 80 on an H200, the scores at T = 197 and 257 on an H100).
/// Deterministic: cuBLAS's batched GEMMs on one stream, no atomics. Limits: 1 <= T <= 512 (the
/// softmax keeps a row in registers), 1 <= dh, 1 <= B*H <= 2^30. Bad shapes and a null or
/// misaligned pointer scratch throw std::invalid_argument; cuBLAS and CUDA failures throw
/// std::runtime_error. Graph-capturable: the pointer arrays are written by a kernel on the stream
/// into caller scratch before each call's GEMMs.
class GemmAttention {
 public:
  /// A cuBLAS handle on `stream` whose products use `workspace`: workspace_bytes of device
  /// memory, 256-byte aligned, that nothing on another stream uses (e.g. LtGemm::workspace() of an
  /// LtGemm on the same stream); nullptr with 0 = no workspace. `compute`: CUBLAS_COMPUTE_32F,
  /// _32F_PEDANTIC or _32F_FAST_TF32, else std::invalid_argument; cuBLAS errors throw
  /// std::runtime_error. The handle's own memory (cublasCreate) is not the caller's to count.
  GemmAttention(cudaStream_t stream, cublasComputeType_t compute, void* workspace, size_t workspace_bytes);
  ~GemmAttention();
  GemmAttention(const GemmAttention&) = delete;
  GemmAttention& operator=(const GemmAttention&) = delete;

  /// Floats of scratch (8-byte aligned) a forward or backward call needs for its pointer arrays:
  /// 12 device pointers per (batch, head) pair.
  static size_t pointer_scratch_floats(int batch, int heads);
  /// Leading dimension (floats) of the probabilities' and dS's rows: T rounded up to 4.
  static int probs_ld(int T) { return (T + 3) / 4 * 4; }
  /// Floats of the probabilities [B, H, T, probs_ld(T)]; backward's dS buffer has the same size.
  static size_t probs_floats(int batch, int T, int heads) { return (size_t)batch * heads * T * probs_ld(T); }
  static size_t dscores_floats(int batch, int T, int heads) { return probs_floats(batch, T, heads); }

  /// Plans the products for n SMs (cublasSetSmCountTarget; 0 = every SM of the device), as
  /// LtGemm::set_sm_count_target does for the other GEMMs. n outside [0, device_sm_count()]
  /// throws std::invalid_argument.
  void set_sm_count_target(int n);
  /// The SM count of the device current at construction.
  int device_sm_count() const { return device_sms_; }

  /// Writes probs ([B, H, T, probs_ld(T)], probs_floats) and out; `scratch`:
  /// pointer_scratch_floats(batch, heads) floats, 8-byte aligned (checked), free between the
  /// call's kernels.
  void forward(const float* qkv, float* probs, float* out, int batch, int T, int heads, int head_dim,
               float* scratch);
  /// Writes forward's probabilities alone (S = QK^T / sqrt(dh) and the row softmax, no O), the
  /// same bits as forward's for the same qkv and SM count target (cuBLAS may pick other kernels for
  /// another target): for a backward that kept none
  /// (--attention gemm-recompute). Arguments as in forward.
  void probs(const float* qkv, float* probs, int batch, int T, int heads, int head_dim, float* scratch);
  /// Writes dqkv; dscores: [B, H, T, probs_ld(T)] fp32 (dscores_floats), overwritten; `scratch` as in
  /// forward. probs must be forward's.
  void backward(const float* qkv, const float* probs, const float* dout, float* dqkv, float* dscores, int batch,
                int T, int heads, int head_dim, float* scratch);

 private:
  // S, the softmax into probs, and O into out unless out is null (forward and probs, checked).
  void scores_softmax(const float* qkv, float* probs, float* out, int batch, int T, int heads, int head_dim,
                      float* scratch);

  cudaStream_t stream_;
  cublasComputeType_t compute_;
  cublasHandle_t handle_ = nullptr;
  int device_sms_ = 0;
};

}  // namespace vitddp
