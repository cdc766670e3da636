#include "cuda/lt_gemm.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>

#include "cuda/check.h"
#include "cuda/device_arena.h"

namespace vitddp {
namespace {

/// Largest power of two (<= 16) dividing the address: the alignment cuBLASLt may assume.
uint32_t alignment_of(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 16;
  while (a > 4 && (v % a) != 0) a /= 2;
  return a;
}

// Everything that determines the descriptors and the algorithm choice.
// Epilogue kinds: 0 none, 1 bias (D += bias[n] per row), 2 row sums of op(A) (cuBLASLt BGRADB).
using PlanKey = std::tuple<bool, bool, int, int, int, int, int, int, int, bool, int, uint32_t,
                           uint32_t, uint32_t, uint32_t>;

struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

std::string shape_string(bool ta, bool tb, int m, int n, int k, int lda, int ldb, int ldc, int ldd) {
  return std::string("gemm(trans_a=") + (ta ? "1" : "0") + ", trans_b=" + (tb ? "1" : "0") +
         ", m=" + std::to_string(m) + ", n=" + std::to_string(n) + ", k=" + std::to_string(k) +
         ", lda=" + std::to_string(lda) + ", ldb=" + std::to_string(ldb) +
         ", ldc=" + std::to_string(ldc) + ", ldd=" + std::to_string(ldd) + ")";
}

}  // namespace

// The operands of one call (used by autotuning).
struct Operands {
  const float *a, *b, *c;
  float* d;
  const float* epi_ptr;  // bias or bias-gradient output, as CUBLASLT_MATMUL_DESC_BIAS_POINTER
  float alpha, beta;
};

struct LtGemm::Impl {
  cudaStream_t stream = nullptr;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  int autotune = 0;
  cublasLtHandle_t handle = nullptr;
  DeviceArena arena;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  std::map<PlanKey, Plan> plans;

  ~Impl() {
    for (auto& kv : plans) destroy(kv.second);
    if (handle) cublasLtDestroy(handle);
  }

  static void destroy(Plan& p) {
    if (p.a) cublasLtMatrixLayoutDestroy(p.a);
    if (p.b) cublasLtMatrixLayoutDestroy(p.b);
    if (p.c) cublasLtMatrixLayoutDestroy(p.c);
    if (p.d) cublasLtMatrixLayoutDestroy(p.d);
    if (p.op) cublasLtMatmulDescDestroy(p.op);
  }

  // Column-major view of the row-major problem: D^T[n,m] = op(B)^T[n,k] @ op(A)^T[k,m], so
  // cuBLASLt's "A" is our B buffer and its "B" is our A buffer.
  Plan& plan_for(const PlanKey& key, const Operands& ops) {
    auto it = plans.find(key);
    if (it != plans.end()) return it->second;
    const auto [ta, tb, m, n, k, lda, ldb, ldc, ldd, beta_nonzero, epi_kind, al_a, al_b, al_c,
                al_d] = key;
    (void)beta_nonzero;
    Plan p;
    try {
      CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, compute, CUDA_R_32F));
      const cublasOperation_t op_a = tb ? CUBLAS_OP_T : CUBLAS_OP_N;  // on our B buffer
      const cublasOperation_t op_b = ta ? CUBLAS_OP_T : CUBLAS_OP_N;  // on our A buffer
      const cublasLtPointerMode_t pm = CUBLASLT_POINTER_MODE_HOST;
      const cublasLtEpilogue_t epi = epi_kind == 1   ? CUBLASLT_EPILOGUE_BIAS
                                     : epi_kind == 2 ? CUBLASLT_EPILOGUE_BGRADB
                                                     : CUBLASLT_EPILOGUE_DEFAULT;
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_POINTER_MODE, &pm, sizeof(pm)));
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
      // cuBLASLt "A" = our B: op_a(A_cm) is [n,k]; stored [n,k] (N) or [k,n] (T), ld = ldb.
      CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_32F, tb ? k : n, tb ? n : k, ldb));
      // cuBLASLt "B" = our A: op_b(B_cm) is [k,m]; stored [k,m] (N) or [m,k] (T), ld = lda.
      CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_32F, ta ? m : k, ta ? k : m, lda));
      CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, CUDA_R_32F, n, m, ldc));
      CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d, CUDA_R_32F, n, m, ldd));

      cublasLtMatmulPreference_t pref = nullptr;
      CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
      constexpr int kMaxCandidates = 32;
      cublasLtMatmulHeuristicResult_t results[kMaxCandidates] = {};
      const int want = std::max(1, std::min(autotune, kMaxCandidates));
      int found = 0;
      cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
      {
        const uint64_t ws = workspace_bytes;
        const uint32_t aa = al_b, ab = al_a, ac = al_c, ad = al_d;  // swapped: cm A is our B
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
        if (st == CUBLAS_STATUS_SUCCESS)
          st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof(aa));
        if (st == CUBLAS_STATUS_SUCCESS)
          st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab, sizeof(ab));
        if (st == CUBLAS_STATUS_SUCCESS)
          st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ac, sizeof(ac));
        if (st == CUBLAS_STATUS_SUCCESS)
          st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ad, sizeof(ad));
        if (st == CUBLAS_STATUS_SUCCESS)
          st = cublasLtMatmulAlgoGetHeuristic(handle, p.op, p.a, p.b, p.c, p.d, pref, want, results, &found);
      }
      cublasLtMatmulPreferenceDestroy(pref);
      CUBLAS_CHECK(st);
      if (found < 1)
        throw std::runtime_error("cuBLASLt found no fp32 algorithm for " +
                                 shape_string(ta, tb, m, n, k, lda, ldb, ldc, ldd) +
                                 (epi_kind == 1   ? " with bias epilogue"
                                  : epi_kind == 2 ? " with bias-gradient epilogue"
                                                  : ""));
      p.algo = results[0].algo;
      if (found > 1) p.algo = results[fastest(p, results, found, ops, m, ldd)].algo;
    } catch (...) {
      destroy(p);
      throw;
    }
    return plans.emplace(key, p).first->second;
  }

  // Times each candidate (3 runs after a warm-up) writing to a temporary output; returns the
  // index of the fastest. Candidates that fail to launch are skipped.
  int fastest(Plan& p, const cublasLtMatmulHeuristicResult_t* results, int found,
              const Operands& ops, int m, int ldd) {
    DeviceBuffer<float> tmp((size_t)m * ldd, "cuBLASLt autotuning output");
    if (ops.epi_ptr)
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                  &ops.epi_ptr, sizeof(ops.epi_ptr)));
    cudaEvent_t e0 = nullptr, e1 = nullptr;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    int best = 0;
    float best_ms = -1;
    try {
      for (int i = 0; i < found; ++i) {
        if (results[i].workspaceSize > workspace_bytes) continue;
        auto run = [&]() {
          return cublasLtMatmul(handle, p.op, &ops.alpha, ops.b, p.a, ops.a, p.b, &ops.beta, ops.c,
                                p.c, tmp.get(), p.d, &results[i].algo, workspace, workspace_bytes,
                                stream);
        };
        if (run() != CUBLAS_STATUS_SUCCESS) continue;
        CUDA_CHECK(cudaEventRecord(e0, stream));
        for (int r = 0; r < 3; ++r) CUBLAS_CHECK(run());
        CUDA_CHECK(cudaEventRecord(e1, stream));
        CUDA_CHECK(cudaEventSynchronize(e1));
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        if (best_ms < 0 || ms < best_ms) {
          best = i;
          best_ms = ms;
        }
      }
    } catch (...) {
      cudaEventDestroy(e0);
      cudaEventDestroy(e1);
      throw;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return best;
  }
};

LtGemm::LtGemm(cudaStream_t stream, const LtGemmOptions& o) : impl_(new Impl) {
  if (o.compute != CUBLAS_COMPUTE_32F && o.compute != CUBLAS_COMPUTE_32F_PEDANTIC)
    throw std::invalid_argument("LtGemm: compute type must be CUBLAS_COMPUTE_32F or _PEDANTIC");
  const size_t workspace_bytes = o.workspace_bytes;
  impl_->stream = stream;
  impl_->compute = o.compute;
  impl_->autotune = o.autotune_candidates;
  CUBLAS_CHECK(cublasLtCreate(&impl_->handle));
  impl_->workspace_bytes = workspace_bytes;
  if (workspace_bytes > 0)
    impl_->workspace = impl_->arena.alloc<char>(workspace_bytes, "cuBLASLt workspace");
}

LtGemm::~LtGemm() = default;

size_t LtGemm::device_bytes() const { return impl_->arena.bytes(); }
size_t LtGemm::plan_count() const { return impl_->plans.size(); }

void LtGemm::gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                  int lda, const float* b, int ldb, float beta, const float* c, int ldc, float* d,
                  int ldd, const float* bias, float* a_row_sums) {
  if (bias && a_row_sums)
    throw std::invalid_argument("LtGemm::gemm: bias and a_row_sums are exclusive");
  if (beta == 0.0f || c == nullptr) {
    if (beta != 0.0f) throw std::invalid_argument("LtGemm::gemm: beta != 0 needs C");
    c = d;
    ldc = ldd;
  }
  const bool bad = m < 1 || n < 1 || k < 1 || lda < (trans_a ? m : k) ||
                   ldb < (trans_b ? k : n) || ldc < n || ldd < n || (c == d && ldc != ldd) ||
                   !a || !b || !d;
  if (bad)
    throw std::invalid_argument("LtGemm: bad arguments " +
                                shape_string(trans_a, trans_b, m, n, k, lda, ldb, ldc, ldd));
  const int epi_kind = bias ? 1 : a_row_sums ? 2 : 0;
  const void* epi_ptr = bias ? static_cast<const void*>(bias) : static_cast<const void*>(a_row_sums);
  const PlanKey key{trans_a, trans_b, m, n, k, lda, ldb, ldc, ldd, beta != 0.0f, epi_kind,
                    alignment_of(a), alignment_of(b), alignment_of(c), alignment_of(d)};
  Plan& p = impl_->plan_for(key, Operands{a, b, c, d, static_cast<const float*>(epi_ptr), alpha, beta});
  if (epi_ptr)
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &epi_ptr,
                                                sizeof(epi_ptr)));
  CUBLAS_CHECK(cublasLtMatmul(impl_->handle, p.op, &alpha, b, p.a, a, p.b, &beta, c, p.c, d, p.d,
                              &p.algo, impl_->workspace, impl_->workspace_bytes, impl_->stream));
}

void linear_forward(LtGemm& lt, const float* x, const float* w, const float* bias,
                    const float* residual, float* y, int m, int n, int k, int ldx) {
  lt.gemm(false, true, m, n, k, 1.0f, x, ldx > 0 ? ldx : k, w, k, residual ? 1.0f : 0.0f,
          residual, n, y, n, bias);
}

void linear_backward_weight(LtGemm& lt, const float* dy, const float* x, float* dw, int m, int n,
                            int k, bool accumulate, int ldx) {
  lt.gemm(true, false, n, k, m, 1.0f, dy, n, x, ldx > 0 ? ldx : k, accumulate ? 1.0f : 0.0f,
          accumulate ? dw : nullptr, k, dw, k);
}

void linear_backward_weight_bias(LtGemm& lt, const float* dy, const float* x, float* dw, float* db,
                                 int m, int n, int k, int ldx) {
  lt.gemm(true, false, n, k, m, 1.0f, dy, n, x, ldx > 0 ? ldx : k, 0.0f, nullptr, k, dw, k, nullptr,
          db);
}

void linear_backward_input(LtGemm& lt, const float* dy, const float* w, float* dx, int m, int n,
                           int k) {
  lt.gemm(false, false, m, k, n, 1.0f, dy, n, w, k, 0.0f, nullptr, k, dx, k);
}

}  // namespace vitddp
