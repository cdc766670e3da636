// Row-major GEMMs through cuBLASLt (fp32, TF32 or bf16 operands, fp32 accumulation), with a
// per-shape plan cache.
#pragma once
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace vitddp {

/// cuBLASLt handle + workspace + plan cache, bound to one stream. All matrices are row-major,
/// with an explicit leading dimension (elements between consecutive rows), so a view of every
/// T-th row of a [B*T, D] buffer is (ptr, ld = T*D).
///
/// Element types per call (GemmTypes): fp32 A/B/C/D (the float overloads), bf16 A/B with bf16 or
/// fp32 C/D. Scale type fp32, pointer mode host
/// (device for gemm_device_scalars). The compute type is one per object
/// (LtGemmOptions::compute): CUBLAS_COMPUTE_32F_PEDANTIC or CUBLAS_COMPUTE_32F (strict fp32 for
/// fp32 operands: TF32 is never enabled by them), CUBLAS_COMPUTE_32F_FAST_TF32 (fp32 operands
/// rounded to TF32 inside the tensor cores, fp32 accumulation). bf16 operands always accumulate in
/// fp32 (use CUBLAS_COMPUTE_32F for them).
/// The first call of each shape (types, transposes, sizes, leading dims, pointer alignments,
/// epilogue) builds a plan (descriptors + heuristic algorithm); later calls only set the bias
/// pointer and enqueue. No host synchronisation (unless autotuning, see LtGemmOptions).
///
/// Errors: cuBLASLt / CUDA failures throw std::runtime_error (cuda/check/check_cublaslt.h, cuda/check/check_cuda.h);
/// bad sizes throw std::invalid_argument naming the shape.
struct LtGemmOptions {
  size_t workspace_bytes = size_t(32) << 20;     ///< device workspace for split-K etc.
  /// CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F_PEDANTIC or CUBLAS_COMPUTE_32F_FAST_TF32.
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  /// 0 or 1: take cuBLASLt's first heuristic choice (deterministic, no synchronisation).
  /// n > 1: when a plan is built, time up to n heuristic candidates on the real operands and keep
  /// the fastest; this synchronises `stream` once per new shape. The candidates write D itself
  /// (which the call then overwrites) unless D shares memory with A, B or (beta != 0) C, as when
  /// accumulating in place; then a temporary output of D's size, allocated while timing.
  int autotune_candidates = 0;
  /// Autotuning: SM clock cycles each timed batch's gate (cuda/kernels/spin.h HostGate) waits for
  /// the host before giving up; 0 = about 200 ms at the device's peak clock (longer at lower
  /// clocks); < 0 is refused (std::invalid_argument). After a first time-out the plan's candidates
  /// are timed again from the start, and every batch from then on, behind a ~50-us spin kernel,
  /// with one line on stderr (tests set 1 to take that path).
  long long autotune_gate_cycles = 0;
  /// 0: fp32-operand GEMMs run with `compute`. > 0: they run as 3xTF32 instead, with this many
  /// bytes of device scratch (at least tf32x3_scratch_bytes of the largest call): each fp32
  /// operand X is split into hi = X rounded to TF32 (cvt.rna.tf32.f32) and lo = X - hi (exact in
  /// fp32), and D = alpha * (A_lo B_hi + A_hi B_lo + A_hi B_hi) + beta * C is computed by three
  /// CUBLAS_COMPUTE_32F_FAST_TF32 GEMMs, small terms first, fp32 accumulation (the A_lo B_lo term,
  /// about 2^-22 of the product, is dropped). The "3xTF32" of CUTLASS (OpMultiplyAddFastF32, its
  /// example 27) and XLA's DotAlgorithmPreset.TF32_TF32_F32_X3: about fp32's accuracy on tensor
  /// cores. Not available with the BGRADB epilogue (try_gemm answers false, as when cuBLASLt has
  /// no algorithm, so callers take their column-sum path) or device scalars (std::invalid_argument).
  /// An operand of +-Inf, or one that rounds to Inf, gives NaN instead of Inf.
  size_t tf32x3_scratch_bytes = 0;
};

/// Device scratch (bytes) that the 3xTF32 mode of LtGemmOptions needs for a GEMM whose op(A) is
/// [m,k] and op(B) is [k,n]: the hi and lo halves of both operands, each 16-byte aligned.
size_t tf32x3_scratch_bytes(int m, int n, int k);

/// Element types of one GEMM: A and B share `ab`; C, D and the bias (or bias-gradient) vector
/// share `cd` (cuBLASLt's default bias type is the D type). Supported: {fp32, fp32} with any
/// compute type of LtGemmOptions; {bf16, bf16} and {bf16, fp32} with CUBLAS_COMPUTE_32F.
struct GemmTypes {
  cudaDataType_t ab = CUDA_R_32F;
  cudaDataType_t cd = CUDA_R_32F;
};

/// One GEMM enqueued with timing on (LtGemm::take_timed_calls).
struct TimedGemm {
  /// Types, transposes, m n k, leading dims, then the epilogue and accumulation ("+bias",
  /// "+bias-grad", "+C") and " (3xTF32 term)" for one of a 3xTF32 GEMM's three GEMMs.
  std::string shape;
  /// Its plan's cuBLASLt algorithm: id, tile, stages, split-K, reduction, swizzle, custom, inner
  /// shape, cluster shape (the numbers of cublasLtMatmulAlgoConfigAttributes_t's values).
  std::string algo;
  double ms = 0;  ///< milliseconds of GPU time between the events around it
  /// Autotuning (ms per call, the fastest of its timed batches, alone with its operands warm): the
  /// kept candidate and cuBLASLt's first heuristic candidate. -1 where the plan was not autotuned
  /// (autotuning off, a single candidate, or a 3xTF32 term that adds into its output).
  double tuned_ms = -1;
  double first_ms = -1;
};

class LtGemm {
 public:
  /// Creates the handle and the device workspace; every GEMM goes to `stream`.
  explicit LtGemm(cudaStream_t stream, const LtGemmOptions& options = LtGemmOptions());
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  /// D[m,n] = alpha * op(A)[m,k] @ op(B)[k,n] + beta * C[m,n] (+ bias[n] added to every row).
  ///  - op(A) = A (stored [m,k], lda >= k) or A^T when trans_a (A stored [k,m], lda >= m);
  ///  - op(B) = B (stored [k,n], ldb >= n) or B^T when trans_b (B stored [n,k], ldb >= k);
  ///  - C, D stored [m,n] with ldc, ldd >= n; C may equal D (in place, then ldc == ldd) and is
  ///    ignored when beta == 0 (pass nullptr);
  ///  - bias: nullptr or n floats, fused as the cuBLASLt BIAS epilogue;
  ///  - a_row_sums: nullptr or m floats, overwritten with sum_p op(A)[i, p] (the cuBLASLt BGRADB
  ///    epilogue: the bias gradient of a weight-gradient GEMM dW = dY^T X). Exclusive with bias.
  /// m, n, k >= 1 (k == 0 is not supported).
  void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
            const float* b, int ldb, float beta, const float* c, int ldc, float* d, int ldd,
            const float* bias = nullptr, float* a_row_sums = nullptr);

  /// The same with explicit element types (`types`): a and b point to elements of types.ab; c, d,
  /// bias and a_row_sums to elements of types.cd. Throws std::runtime_error when cuBLASLt has no
  /// algorithm for the configuration.
  void gemm(const GemmTypes& types, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
            const void* a, int lda, const void* b, int ldb, float beta, const void* c, int ldc,
            void* d, int ldd, const void* bias = nullptr, void* a_row_sums = nullptr);

  /// As the typed gemm, but returns false (enqueuing nothing) where cuBLASLt offers no algorithm
  /// for the configuration (e.g. an epilogue not available for these types); the answer is cached
  /// per shape. Bad arguments still throw std::invalid_argument.
  bool try_gemm(const GemmTypes& types, bool trans_a, bool trans_b, int m, int n, int k,
                float alpha, const void* a, int lda, const void* b, int ldb, float beta,
                const void* c, int ldc, void* d, int ldd, const void* bias = nullptr,
                void* a_row_sums = nullptr);

  /// D = alpha * op(A) @ op(B) + beta * C with alpha = d_alpha_beta[0] and beta = d_alpha_beta[1]
  /// read from device memory when the GEMM runs (CUBLASLT_POINTER_MODE_DEVICE), so a GEMM captured
  /// in a CUDA graph takes values written before each replay. Otherwise as the typed gemm without
  /// epilogue; C is required (beta counts as non-zero) and may equal D. Autotuning times the
  /// candidates on a temporary output when C shares D's memory, so the call still applies once.
  /// Throws std::runtime_error when cuBLASLt has no algorithm, std::invalid_argument as gemm.
  void gemm_device_scalars(const GemmTypes& types, bool trans_a, bool trans_b, int m, int n, int k,
                           const float* d_alpha_beta, const void* a, int lda, const void* b, int ldb, const void* c,
                           int ldc, void* d, int ldd);

  /// SMs the GEMMs planned from now on should run on (cuBLASLt's CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET,
  /// the mechanism behind PyTorch's torch._C._set_sm_carveout_experimental): 0 = every SM of the
  /// device; n > 0 = plan (tile shape, split-K, persistent grid size) as if the GPU had n SMs,
  /// because a concurrent stream (NCCL's all-reduce kernels during backward) holds the others. A
  /// persistent GEMM sized for all SMs would otherwise run its last CTAs in a second wave.
  /// Part of the plan key: GEMMs of the same shape under two targets have two plans. With
  /// autotuning, the candidates of such a plan are timed while a kernel on another stream holds
  /// the (device SMs - n) other SMs, so the choice is the algorithm that is fastest with them
  /// taken (persistent kernels sized for every SM are not).
  /// Throws std::invalid_argument for n < 0 or n > device_sm_count().
  void set_sm_count_target(int n);
  /// Whether a gate of the autotuning has timed out, so that candidates are now timed behind the
  /// spin kernel (LtGemmOptions::autotune_gate_cycles).
  bool autotune_gate_timed_out() const;
  /// The SM count target of plans built from now on (0: the device's).
  int sm_count_target() const;
  /// The device's SM count (cudaDevAttrMultiProcessorCount), read when the object was created.
  int device_sm_count() const;

  /// GEMM timing (for benchmarks): while on, every GEMM is bracketed by two CUDA events on the
  /// stream. Off by default (no events are recorded).
  void set_timing(bool on);
  /// Milliseconds of GPU time of the GEMMs enqueued with timing on since the last take (waits for
  /// them to finish), then forgets them. 0 when none.
  double take_timed_ms();
  /// The same GEMMs one by one, in the order enqueued (waits for them, then forgets them).
  /// Throws std::runtime_error on a CUDA error, as take_timed_ms.
  std::vector<TimedGemm> take_timed_calls();

  /// Device bytes held (the workspace, and the 3xTF32 scratch when on).
  size_t device_bytes() const;
  /// The device workspace (workspace_bytes() bytes; null when 0) and the compute type of every
  /// GEMM: for another library's GEMMs enqueued on the same stream (GemmAttention), which may use
  /// the workspace between this object's GEMMs since the stream orders them.
  void* workspace() const;
  size_t workspace_bytes() const;
  cublasComputeType_t compute_type() const;
  /// Number of cached plans (one per distinct shape seen).
  size_t plan_count() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// nn.Linear forward: Y[m,n] = X[m,k] @ W[n,k]^T + bias[n] (+ residual[m,n] when not null).
/// X has leading dimension ldx (>= k; default k), W is row-major [n,k] (torch layout), Y and
/// residual are [m,n] with leading dimension n. bias may be null. residual may equal Y.
/// Overloads: all fp32; bf16 X/W with bf16 bias/residual/Y; bf16 X/W with fp32 bias/residual/Y
/// (fp32 accumulation in every case).
void linear_forward(LtGemm& lt, const float* x, const float* w, const float* bias,
                    const float* residual, float* y, int m, int n, int k, int ldx = 0);
void linear_forward(LtGemm& lt, const __nv_bfloat16* x, const __nv_bfloat16* w,
                    const __nv_bfloat16* bias, const __nv_bfloat16* residual, __nv_bfloat16* y,
                    int m, int n, int k, int ldx = 0);
void linear_forward(LtGemm& lt, const __nv_bfloat16* x, const __nv_bfloat16* w, const float* bias,
                    const float* residual, float* y, int m, int n, int k, int ldx = 0);

/// nn.Linear weight gradient: dW[n,k] = dY[m,n]^T @ X[m,k] (accumulate=false) or
/// dW += dY^T @ X (accumulate=true). dY has leading dimension n, X has ldx (>= k; default k).
/// dW is fp32 in both overloads (bf16 dY and X: fp32 accumulation, fp32 output).
void linear_backward_weight(LtGemm& lt, const float* dy, const float* x, float* dw, int m, int n,
                            int k, bool accumulate, int ldx = 0);
void linear_backward_weight(LtGemm& lt, const __nv_bfloat16* dy, const __nv_bfloat16* x, float* dw,
                            int m, int n, int k, bool accumulate, int ldx = 0);

/// nn.Linear weight and bias gradients in one GEMM (overwrite only): dW[n,k] = dY[m,n]^T @ X[m,k]
/// and db[n] = sum_i dY[i, n] (the cuBLASLt BGRADB epilogue; dW and db fp32). Returns false,
/// enqueuing nothing, where cuBLASLt offers no such algorithm (then use linear_backward_weight
/// and column_sum).
bool linear_backward_weight_bias(LtGemm& lt, const float* dy, const float* x, float* dw, float* db,
                                 int m, int n, int k, int ldx = 0);
bool linear_backward_weight_bias(LtGemm& lt, const __nv_bfloat16* dy, const __nv_bfloat16* x,
                                 float* dw, float* db, int m, int n, int k, int ldx = 0);

/// nn.Linear weight gradient applied in place (the SGD step fused into backward):
/// W[n,k] = beta * W + alpha * dY[m,n]^T @ X[m,k], alpha = d_alpha_beta[0], beta = d_alpha_beta[1]
/// (device memory, read when the GEMM runs). With alpha = -lr and beta = 1 - lr * weight_decay
/// this is torch.optim.SGD's step without momentum, p -= lr * (g + weight_decay * p), for
/// g = dY^T X computed in fp32 and not rounded on its own. W is fp32 [n,k] in both overloads.
void linear_update_weight(LtGemm& lt, const float* dy, const float* x, float* w, const float* d_alpha_beta, int m,
                          int n, int k, int ldx = 0);
void linear_update_weight(LtGemm& lt, const __nv_bfloat16* dy, const __nv_bfloat16* x, float* w,
                          const float* d_alpha_beta, int m, int n, int k, int ldx = 0);

/// nn.Linear input gradient: dX[m,k] = dY[m,n] @ W[n,k] (overwrites dX, leading dimension k).
void linear_backward_input(LtGemm& lt, const float* dy, const float* w, float* dx, int m, int n,
                           int k);
void linear_backward_input(LtGemm& lt, const __nv_bfloat16* dy, const __nv_bfloat16* w,
                           __nv_bfloat16* dx, int m, int n, int k);

}  // namespace vitddp
