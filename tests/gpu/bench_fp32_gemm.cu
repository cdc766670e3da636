// Hidden benchmark ([.bench][fp32_gemm]): the ways to run an fp32 GEMM on this GPU at vit_l_32's
// batch-32 nn.Linear shapes (forward, input gradient, weight gradient), each timed and held against
// cuBLAS's DGEMM of the same fp32 inputs:
//   strict fp32      LtGemm, CUBLAS_COMPUTE_32F_PEDANTIC (SIMT FMA; --fp32-matmul ieee)
//   tf32             LtGemm, CUBLAS_COMPUTE_32F_FAST_TF32 (one TF32 pass; --precision tf32)
//   3xTF32           LtGemm's 3xTF32 mode, the operand splits included (--fp32-matmul tf32x3)
//   cuBLAS BF16x9    cublasGemmEx with CUBLAS_COMPUTE_32F_EMULATED_16BFX9 and the eager emulation
//                    strategy (cuBLAS's own fp32 emulation; where the GPU has none it runs as fp32)
// Prints a table; asserts nothing about speed (a benchmark, not a test).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "cuda/check/check_cublaslt.h"
#include "cuda/kernels/lt_gemm.h"
#include "tests/catch.h"
#include "tests/gpu/gpu_test_util.h"

using namespace vitddp;
using namespace vitddp_test;

namespace {

__global__ void widen(const float* a, double* b, size_t n) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) b[i] = a[i];
}

void to_double(const DevVec<float>& a, DevVec<double>& b, size_t n) {
  widen<<<(unsigned)((n + 255) / 256), 256>>>(a.get(), b.get(), n);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace

TEST_CASE("bench: fp32 GEMMs on this GPU: strict, TF32, 3xTF32, cuBLAS BF16x9 emulation", "[.bench][fp32_gemm]") {
  REQUIRE_GPU();
  Stream st;
  const int N = 32 * 50, D = 1024, M = 4096;
  struct Shape {
    const char* name;
    bool ta, tb;
    int m, n, k;
  };  // D[m,n] = op(A)[m,k] op(B)[k,n], row-major
  const std::vector<Shape> shapes = {
      {"fwd qkv", false, true, N, 3 * D, D}, {"fwd fc1", false, true, N, M, D}, {"fwd fc2", false, true, N, D, M},
      {"dX fc1", false, false, N, D, M},     {"dW fc1", true, false, M, D, N},  {"dW fc2", true, false, D, M, N},
  };
  size_t scratch = 0;
  for (const Shape& s : shapes) scratch = std::max(scratch, tf32x3_scratch_bytes(s.m, s.n, s.k));
  LtGemmOptions strict_o, tf32_o, x3_o;
  strict_o.compute = x3_o.compute = CUBLAS_COMPUTE_32F_PEDANTIC;
  tf32_o.compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  x3_o.tf32x3_scratch_bytes = scratch;
  LtGemm strict(st.s, strict_o), tf32(st.s, tf32_o), x3(st.s, x3_o);
  cublasHandle_t h;
  CUBLAS_CHECK(cublasCreate(&h));
  CUBLAS_CHECK(cublasSetStream(h, st.s));

  std::printf(
      "\nfp32 GEMMs at vit_l_32 batch-32 shapes: ms, TFLOP/s and norm-relative error against DGEMM on the same "
      "inputs\n");
  std::printf("| GEMM | m x n x k | strict fp32 | tf32 | 3xTF32 (splits included) | cuBLAS BF16x9 eager |\n");
  std::printf("| --- | --- | --- | --- | --- | --- |\n");
  for (const Shape& s : shapes) {
    const size_t na = (size_t)s.m * s.k, nb = (size_t)s.k * s.n, nc = (size_t)s.m * s.n;
    DevVec<float> a(normal_vec(na, 1, 1)), b(normal_vec(nb, 1, 2)), d(nc);
    DevVec<double> a64(na), b64(nb), d64(nc);
    to_double(a, a64, na);
    to_double(b, b64, nb);
    CUDA_CHECK(cudaDeviceSynchronize());
    const int lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
    // Row-major D = op(A) op(B) is column-major D^T = op(B)^T op(A)^T: cuBLAS's A is our B.
    const cublasOperation_t op_b = s.tb ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = s.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    const double one = 1, zero = 0;
    CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
    CUBLAS_CHECK(
        cublasDgemm(h, op_b, op_a, s.n, s.m, s.k, &one, b64.get(), ldb, a64.get(), lda, &zero, d64.get(), s.n));
    CUDA_CHECK(cudaStreamSynchronize(st.s));  // the copy below runs on the legacy stream
    const std::vector<double> ref = [&] {
      std::vector<double> r(nc);
      CUDA_CHECK(cudaMemcpy(r.data(), d64.get(), nc * sizeof(double), cudaMemcpyDeviceToHost));
      return r;
    }();
    auto cell = [&](const std::function<void()>& run) {
      CUDA_CHECK(cudaMemset(d.get(), 0, nc * sizeof(float)));
      const double ms = time_ms(st.s, run);  // gpu_test_util.h: 3 warm-up runs, mean of 20
      const double err = norm_rel_err(d.download(), ref);
      char buf[96];
      std::snprintf(buf, sizeof buf, "%.3f ms, %.0f TFLOP/s, %.1e", ms, 2.0 * s.m * s.n * s.k / ms * 1e-9, err);
      return std::string(buf);
    };
    auto lt = [&](LtGemm& g) {
      return [&] {
        g.gemm(s.ta, s.tb, s.m, s.n, s.k, 1.0f, a.get(), lda, b.get(), ldb, 0.0f, nullptr, s.n, d.get(), s.n);
      };
    };
    const std::string c_strict = cell(lt(strict)), c_tf32 = cell(lt(tf32)), c_x3 = cell(lt(x3));
    CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_FP32_EMULATED_BF16X9_MATH));
    CUBLAS_CHECK(cublasSetEmulationStrategy(h, CUBLAS_EMULATION_STRATEGY_EAGER));
    const float onef = 1, zerof = 0;
    const std::string c_bf16x9 = cell([&] {
      CUBLAS_CHECK(cublasGemmEx(h, op_b, op_a, s.n, s.m, s.k, &onef, b.get(), CUDA_R_32F, ldb, a.get(), CUDA_R_32F, lda,
                                &zerof, d.get(), CUDA_R_32F, s.n, CUBLAS_COMPUTE_32F_EMULATED_16BFX9,
                                CUBLAS_GEMM_DEFAULT));
    });
    std::printf("| %s | %d x %d x %d | %s | %s | %s | %s |\n", s.name, s.m, s.n, s.k, c_strict.c_str(), c_tf32.c_str(),
                c_x3.c_str(), c_bf16x9.c_str());
  }
  cublasDestroy(h);
}
