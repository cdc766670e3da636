// Host reference of the row-major GEMM that cuda/kernels/lt_gemm.h computes, in double: the reference of
// the fp32 and bf16 GEMM tests.
#pragma once
#include <cstddef>
#include <vector>

namespace vitddp_test {

/// D = alpha op(A) op(B) + beta C (+ bias broadcast over rows), all row-major: op(A) is [m, k]
/// (A stored [m, lda] or, with ta, [k, lda] transposed), op(B) is [k, n] (B stored [k, ldb] or,
/// with tb, [n, ldb] transposed), C [m, ldc] (null: none), bias [n] (null: none). Returns D
/// [m, n] in double (the inputs' floats widened, sums in double).
inline std::vector<double> host_gemm(bool ta, bool tb, int m, int n, int k, double alpha, const std::vector<float>& a,
                                     int lda, const std::vector<float>& b, int ldb, double beta,
                                     const std::vector<float>* c, int ldc, const std::vector<float>* bias) {
  std::vector<double> d((size_t)m * n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int p = 0; p < k; ++p) {
        const double av = ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p];
        const double bv = tb ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j];
        s += av * bv;
      }
      double v = alpha * s;
      if (c) v += beta * (*c)[(size_t)i * ldc + j];
      if (bias) v += (*bias)[j];
      d[(size_t)i * n + j] = v;
    }
  return d;
}

}  // namespace vitddp_test
