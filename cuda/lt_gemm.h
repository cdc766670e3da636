// Row-major fp32 GEMMs through cuBLASLt (strict fp32: no TF32), with a per-shape plan cache.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <memory>

namespace vitddp {

/// cuBLASLt handle + workspace + plan cache, bound to one stream. All matrices are fp32,
/// row-major, with an explicit leading dimension (elements between consecutive rows), so a view
/// of every T-th row of a [B*T, D] buffer is (ptr, ld = T*D).
///
/// Strict fp32: compute type CUBLAS_COMPUTE_32F (or CUBLAS_COMPUTE_32F_PEDANTIC when asked),
/// scale type fp32, fp32 A/B/C/D; TF32 is never enabled. Pointer mode host.
/// The first call of each shape (transposes, sizes, leading dims, pointer alignments, bias
/// presence) builds a plan (descriptors + heuristic algorithm); later calls only set the bias
/// pointer and enqueue. No host synchronisation (unless autotuning, see LtGemmOptions).
///
/// Errors: cuBLASLt / CUDA failures throw std::runtime_error (cuda/check.h); bad sizes throw
/// std::invalid_argument naming the shape.
struct LtGemmOptions {
  size_t workspace_bytes = size_t(32) << 20;     ///< device workspace for split-K etc.
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;  ///< or CUBLAS_COMPUTE_32F_PEDANTIC
  /// 0 or 1: take cuBLASLt's first heuristic choice (deterministic, no synchronisation).
  /// n > 1: when a plan is built, time up to n heuristic candidates on the real operands (output
  /// to a temporary buffer) and keep the fastest; this synchronises `stream` once per new shape.
  int autotune_candidates = 0;
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

  /// Device bytes held (the workspace).
  size_t device_bytes() const;
  /// Number of cached plans (one per distinct shape seen).
  size_t plan_count() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// nn.Linear forward: Y[m,n] = X[m,k] @ W[n,k]^T + bias[n] (+ residual[m,n] when not null).
/// X has leading dimension ldx (>= k; default k), W is row-major [n,k] (torch layout), Y and
/// residual are [m,n] with leading dimension n. bias may be null. residual may equal Y.
void linear_forward(LtGemm& lt, const float* x, const float* w, const float* bias,
                    const float* residual, float* y, int m, int n, int k, int ldx = 0);

/// nn.Linear weight gradient: dW[n,k] = dY[m,n]^T @ X[m,k] (accumulate=false) or
/// dW += dY^T @ X (accumulate=true). dY has leading dimension n, X has ldx (>= k; default k).
void linear_backward_weight(LtGemm& lt, const float* dy, const float* x, float* dw, int m, int n,
                            int k, bool accumulate, int ldx = 0);

/// nn.Linear weight and bias gradients in one GEMM (overwrite only): dW[n,k] = dY[m,n]^T @ X[m,k]
/// and db[n] = sum_i dY[i, n] (the cuBLASLt BGRADB epilogue, fp32).
void linear_backward_weight_bias(LtGemm& lt, const float* dy, const float* x, float* dw, float* db,
                                 int m, int n, int k, int ldx = 0);

/// nn.Linear input gradient: dX[m,k] = dY[m,n] @ W[n,k] (overwrites dX, leading dimension k).
void linear_backward_input(LtGemm& lt, const float* dy, const float* w, float* dx, int m, int n,
                           int k);

}  // namespace vitddp
