#include "cuda/kernels/lt_gemm.h"

#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cuda/check/check_cuda.h"
#include "cuda/check/check_cublaslt.h"
#include "cuda/kernels/event_pair.h"
#include "cuda/kernels/spin.h"
#include "cuda/model/device_arena.h"

namespace vitddp {
namespace {

/// Largest power of two (<= 16) dividing the address: the alignment cuBLASLt may assume. (Never
/// below 2; fp32 pointers always give >= 4.)
uint32_t alignment_of(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 16;
  while (a > 2 && (v % a) != 0) a /= 2;
  return a;
}

// 3xTF32 operand split: hi[i] = X rounded to TF32 (round to nearest, ties away from zero, as
// cvt.rna.tf32.f32), lo[i] = X - hi[i], exact in fp32; X row-major [rows, cols] with leading
// dimension ld, hi and lo compact [rows, cols].
__global__ void split_tf32_kernel(const float* __restrict__ x, int rows, int cols, int ld, float* __restrict__ hi,
                                  float* __restrict__ lo) {
  const size_t n = (size_t)rows * cols;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const size_t r = i / cols, c = i - r * cols;
    const float v = x[r * ld + c];
    uint32_t h;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(h) : "f"(v));
    const float hv = __uint_as_float(h);
    hi[i] = hv;
    lo[i] = v - hv;
  }
}

/// Floats of one split half of a [rows, cols] operand, rounded up to 16 bytes.
size_t split_floats(int rows, int cols) { return ((size_t)rows * cols + 3) / 4 * 4; }

size_t type_bytes(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }

const char* type_name(cudaDataType_t t) {
  return t == CUDA_R_32F ? "fp32" : t == CUDA_R_16BF ? "bf16" : "other";
}

// Everything that determines the descriptors and the algorithm choice.
// Epilogue kinds: 0 none, 1 bias (D += bias[n] per row), 2 row sums of op(A) (cuBLASLt BGRADB).
// Then the SM count target (0 = the device's) and the pointer mode of alpha and beta (true:
// CUBLASLT_POINTER_MODE_DEVICE, read from device memory when the GEMM runs).
// Last, whether the plan is a term of a 3xTF32 GEMM (CUBLAS_COMPUTE_32F_FAST_TF32 whatever the
// object's compute type).
using PlanKey = std::tuple<bool, bool, int, int, int, int, int, int, int, bool, int, uint32_t, uint32_t, uint32_t,
                           uint32_t, int, int, int, bool, bool>;

struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool supported = true;  ///< false: cuBLASLt offered no algorithm (descriptors destroyed)
  std::string shape;      ///< shape_string of the call that built it
  double tuned_ms = -1, first_ms = -1;  ///< autotuning: ms per call of the kept and the first candidate
};

/// The configuration of a cuBLASLt algorithm as "algo A tile T stages S split-K K reduction R
/// swizzle W custom C inner I cluster L" (cublasLtMatmulAlgoConfigAttributes_t; tile, stages,
/// reduction, inner and cluster are the numbers of cublasLtMatmulTile_t, cublasLtMatmulStages_t,
/// cublasLtReductionScheme_t, cublasLtMatmulInnerShape_t and cublasLtClusterShape_t; split-K -1:
/// chosen by the kernel at run time, as cuBLASLt's trace prints numSplitsK=-1).
std::string algo_string(const cublasLtMatmulAlgo_t& algo) {
  // Attributes of 4 bytes (int32_t or uint32_t: `is_signed` says which) or 2 (uint16_t, read into
  // the low bytes of a zeroed 4-byte value, little-endian).
  auto get = [&](cublasLtMatmulAlgoConfigAttributes_t attr, size_t bytes, bool is_signed) {
    uint32_t v = 0;
    size_t written = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &v, bytes, &written) != CUBLAS_STATUS_SUCCESS)
      return std::string("?");
    return is_signed ? std::to_string(static_cast<int32_t>(v)) : std::to_string(v);
  };
  return "algo " + get(CUBLASLT_ALGO_CONFIG_ID, 4, true) + " tile " + get(CUBLASLT_ALGO_CONFIG_TILE_ID, 4, false) +
         " stages " + get(CUBLASLT_ALGO_CONFIG_STAGES_ID, 4, false) + " split-K " +
         get(CUBLASLT_ALGO_CONFIG_SPLITK_NUM, 4, true) + " reduction " +
         get(CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, 4, false) + " swizzle " +
         get(CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, 4, false) + " custom " +
         get(CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, 4, false) + " inner " +
         get(CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, 2, false) + " cluster " +
         get(CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, 2, false);
}

std::string shape_string(const GemmTypes& t, bool ta, bool tb, int m, int n, int k, int lda,
                         int ldb, int ldc, int ldd) {
  return std::string("gemm(") + type_name(t.ab) + " x " + type_name(t.ab) + " -> " +
         type_name(t.cd) + ", trans_a=" + (ta ? "1" : "0") + ", trans_b=" + (tb ? "1" : "0") +
         ", m=" + std::to_string(m) + ", n=" + std::to_string(n) + ", k=" + std::to_string(k) +
         ", lda=" + std::to_string(lda) + ", ldb=" + std::to_string(ldb) +
         ", ldc=" + std::to_string(ldc) + ", ldd=" + std::to_string(ldd) + ")";
}

/// Bytes a row-major matrix of `rows` rows of `cols` elements, `ld` apart, spans.
size_t span_bytes(int rows, int cols, int ld, cudaDataType_t t) {
  return ((size_t)(rows - 1) * ld + cols) * type_bytes(t);
}

/// True when [p, p + pb) and [q, q + qb) share a byte.
bool overlaps(const void* p, size_t pb, const void* q, size_t qb) {
  const auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(q);
  return a < b + qb && b < a + pb;
}

}  // namespace

// The operands of one call (used by autotuning).
struct Operands {
  const void *a, *b, *c;
  void* d;
  const void* epi_ptr;  // bias or bias-gradient output, as CUBLASLT_MATMUL_DESC_BIAS_POINTER
  float alpha, beta;
  const float* dev_scalars;  // nullptr, or alpha and beta in device memory (pointer mode device)
};

/// The alpha and beta pointers of cublasLtMatmul: the host values, or the device pair.
const void* alpha_ptr(const Operands& o) { return o.dev_scalars ? (const void*)o.dev_scalars : &o.alpha; }
const void* beta_ptr(const Operands& o) { return o.dev_scalars ? (const void*)(o.dev_scalars + 1) : &o.beta; }

struct LtGemm::Impl {
  cudaStream_t stream = nullptr;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  int autotune = 0;
  float* split = nullptr;  // 3xTF32 mode: the operands' hi and lo halves (split_bytes), else null
  size_t split_bytes = 0;
  int sm_target = 0;  // CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET of plans built now (0: all SMs)
  int device_sms = 0, clock_khz = 0;
  cudaStream_t hold_stream = nullptr;  // autotuning under a reduced target: the SM-holding kernel's stream
  std::unique_ptr<HostGate> gate;      // autotuning: what each timed batch queues behind (made on first use)
  bool gate_timed_out = false;         // the gate once gave up waiting: later batches queue behind a spin instead
  long long gate_cycles = 0;           // LtGemmOptions::autotune_gate_cycles
  cublasLtHandle_t handle = nullptr;
  DeviceArena arena;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  std::map<PlanKey, Plan> plans;
  // GEMM timing: timed[0, timed_used) are the GEMMs since the last take, each its two events and
  // its plan (plans live in the map until the object dies, so the pointers stay valid).
  struct TimedCall {
    cudaEvent_t start = nullptr, end = nullptr;
    const Plan* plan = nullptr;
  };
  bool timing = false;
  std::vector<TimedCall> timed;
  size_t timed_used = 0;

  ~Impl() {
    for (auto& kv : plans) destroy(kv.second);
    for (auto& e : timed) {
      cudaEventDestroy(e.start);
      cudaEventDestroy(e.end);
    }
    if (handle) cublasLtDestroy(handle);
    if (hold_stream) cudaStreamDestroy(hold_stream);
  }

  static void destroy(Plan& p) {
    if (p.a) cublasLtMatrixLayoutDestroy(p.a);
    if (p.b) cublasLtMatrixLayoutDestroy(p.b);
    if (p.c) cublasLtMatrixLayoutDestroy(p.c);
    if (p.d) cublasLtMatrixLayoutDestroy(p.d);
    if (p.op) cublasLtMatmulDescDestroy(p.op);
    p = Plan{};
  }

  // Column-major view of the row-major problem: D^T[n,m] = op(B)^T[n,k] @ op(A)^T[k,m], so
  // cuBLASLt's "A" is our B buffer and its "B" is our A buffer.
  Plan& plan_for(const PlanKey& key, const Operands& ops) {
    auto it = plans.find(key);
    if (it != plans.end()) return it->second;
    const auto [ta, tb, m, n, k, lda, ldb, ldc, ldd, beta_nonzero, epi_kind, al_a, al_b, al_c, al_d, ab_type, cd_type,
                sms, device_scalars, tf32_term] = key;
    const auto ab = static_cast<cudaDataType_t>(ab_type), cd = static_cast<cudaDataType_t>(cd_type);
    Plan p;
    p.shape = shape_string(GemmTypes{ab, cd}, ta, tb, m, n, k, lda, ldb, ldc, ldd) +
              (epi_kind == 1   ? " +bias"
               : epi_kind == 2 ? " +bias-grad"
                               : "") +
              (beta_nonzero ? " +C" : "") + (tf32_term ? " (3xTF32 term)" : "");
    try {
      CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, tf32_term ? CUBLAS_COMPUTE_32F_FAST_TF32 : compute, CUDA_R_32F));
      const cublasOperation_t op_a = tb ? CUBLAS_OP_T : CUBLAS_OP_N;  // on our B buffer
      const cublasOperation_t op_b = ta ? CUBLAS_OP_T : CUBLAS_OP_N;  // on our A buffer
      const cublasLtPointerMode_t pm = device_scalars ? CUBLASLT_POINTER_MODE_DEVICE : CUBLASLT_POINTER_MODE_HOST;
      const cublasLtEpilogue_t epi = epi_kind == 1   ? CUBLASLT_EPILOGUE_BIAS
                                     : epi_kind == 2 ? CUBLASLT_EPILOGUE_BGRADB
                                                     : CUBLASLT_EPILOGUE_DEFAULT;
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_POINTER_MODE, &pm, sizeof(pm)));
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
      if (sms > 0) {
        const int32_t target = sms;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &target, sizeof(target)));
      }
      // cuBLASLt "A" = our B: op_a(A_cm) is [n,k]; stored [n,k] (N) or [k,n] (T), ld = ldb.
      CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, ab, tb ? k : n, tb ? n : k, ldb));
      // cuBLASLt "B" = our A: op_b(B_cm) is [k,m]; stored [k,m] (N) or [m,k] (T), ld = lda.
      CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, ab, ta ? m : k, ta ? k : m, lda));
      CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, cd, n, m, ldc));
      CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d, cd, n, m, ldd));

      cublasLtMatmulPreference_t pref = nullptr;
      CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
      constexpr int kMaxCandidates = 32;
      cublasLtMatmulHeuristicResult_t results[kMaxCandidates] = {};
      const int want = std::max(1, std::min(autotune, kMaxCandidates));
      int found = 0;
      cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
      {
        const uint64_t ws = workspace_bytes;
        const uint32_t aa = al_b, ab_al = al_a, ac = al_c, ad = al_d;  // swapped: cm A is our B
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
        if (st == CUBLAS_STATUS_SUCCESS)
          st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof(aa));
        if (st == CUBLAS_STATUS_SUCCESS)
          st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab_al, sizeof(ab_al));
        if (st == CUBLAS_STATUS_SUCCESS)
          st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ac, sizeof(ac));
        if (st == CUBLAS_STATUS_SUCCESS)
          st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ad, sizeof(ad));
        if (st == CUBLAS_STATUS_SUCCESS)
          st = cublasLtMatmulAlgoGetHeuristic(handle, p.op, p.a, p.b, p.c, p.d, pref, want, results, &found);
      }
      cublasLtMatmulPreferenceDestroy(pref);
      if (st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && found < 1)) {
        destroy(p);
        p.supported = false;  // remembered: try_gemm answers false, gemm throws
        return plans.emplace(key, p).first->second;
      }
      CUBLAS_CHECK(st);
      p.algo = results[0].algo;
      if (found > 1) {
        // Candidates may write D itself when no operand they read shares its memory: the call
        // being planned overwrites it next. Otherwise (C = D when accumulating) a temporary output.
        const size_t d_bytes = span_bytes(m, n, ldd, cd);
        const bool d_free = !overlaps(ops.d, d_bytes, ops.a, span_bytes(ta ? k : m, ta ? m : k, lda, ab)) &&
                            !overlaps(ops.d, d_bytes, ops.b, span_bytes(tb ? n : k, tb ? k : n, ldb, ab)) &&
                            (!beta_nonzero || !overlaps(ops.d, d_bytes, ops.c, span_bytes(m, n, ldc, cd))) &&
                            (epi_kind != 1 || !overlaps(ops.d, d_bytes, ops.epi_ptr, (size_t)n * type_bytes(cd)));
        // A 3xTF32 term adding into D (the second and third, and the first when C is D) keeps the
        // heuristic's choice: timing it would need a temporary output the memory estimate does not hold.
        if (d_free || !tf32_term) p.algo = results[fastest(p, results, found, ops, d_free ? 0 : d_bytes, sms)].algo;
      }
    } catch (...) {
      destroy(p);
      throw;
    }
    return plans.emplace(key, p).first->second;
  }

  // Times the candidates writing to ops.d, or to a temporary output of tmp_bytes when not 0, and
  // returns the index of the fastest (0, the heuristic's first choice, when none can run). Each candidate that fits the
  // workspace runs once as a warm-up (one that fails to launch is skipped), then in kRounds interleaved rounds (so a
  // clock ramp or other drift touches every candidate alike) a batch of kRuns back-to-back runs queued behind a
  // HostGate that the host opens once all of them are enqueued (so the batch times the GPU, not the host's launch rate,
  // which for 20-us bf16 GEMMs is the same order, and many times more under a profiler that intercepts each launch); a
  // candidate's time is its fastest batch.
  int fastest(Plan& p, const cublasLtMatmulHeuristicResult_t* results, int found, const Operands& ops,
              size_t tmp_bytes, int sms) {
    constexpr int kRounds = 3, kRuns = 3;
    DeviceBuffer<char> tmp;
    if (tmp_bytes > 0) tmp = DeviceBuffer<char>(tmp_bytes, "cuBLASLt autotuning output");
    void* const out = tmp_bytes > 0 ? static_cast<void*>(tmp.get()) : ops.d;
    if (ops.epi_ptr)
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                  &ops.epi_ptr, sizeof(ops.epi_ptr)));
    EventPair ev;
    std::vector<float> best_ms(found, -1.0f);  // -1: not runnable
    // Plans for a reduced SM count are timed the way they will run: while (device SMs - target)
    // SMs are held by another stream's kernel (as NCCL's kernels hold them during backward).
    const int held = sms > 0 ? device_sms - sms : 0;
    if (!gate)  // gives up after about 200 ms at the peak clock unless told otherwise
      gate = std::make_unique<HostGate>(gate_cycles > 0 ? gate_cycles : std::max(1LL, (long long)clock_khz * 200));
    if (held > 0 && !hold_stream) {
      int lo = 0, hi = 0;
      CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
      CUDA_CHECK(cudaStreamCreateWithPriority(&hold_stream, cudaStreamNonBlocking, hi));
    }
    auto run = [&](int i) {
      return cublasLtMatmul(handle, p.op, alpha_ptr(ops), ops.b, p.a, ops.a, p.b, beta_ptr(ops), ops.c, p.c, out, p.d,
                            &results[i].algo, workspace, workspace_bytes, stream);
    };
    for (int i = 0; i < found; ++i) {
      if (results[i].workspaceSize > workspace_bytes) continue;
      if (run(i) == CUBLAS_STATUS_SUCCESS)
        best_ms[i] = 0.0f;
      else
        (void)cudaGetLastError();  // a launch error of a skipped candidate must not surface later
    }
    CUDA_CHECK(cudaStreamSynchronize(stream));
    // One batch of candidate i: kRuns back-to-back runs between ev's two records, queued behind the gate.
    // Where launches wait for the kernel to end (CUDA_LAUNCH_BLOCKING=1, a profiler replaying every
    // kernel) the gate cannot open before its limit; from its first time-out on, the batches queue
    // behind a ~50-us spin instead.
    auto time_batch = [&](int i) {
      if (held > 0) {
        // The stand-in for a concurrent stream's kernels (NCCL's) while candidates are timed for a
        // reduced SM count target. Its thread blocks are small, so the scheduler may place several on
        // one SM, and the hold may end before a slow candidate's timed runs do; both make it a rough
        // stand-in (results/h200x2/overlap).
        spin_cycles((long long)clock_khz * 3, held, 128, hold_stream);  // ~3 ms at the peak clock
      }
      const bool gated = !gate_timed_out;
      if (gated)
        gate->close(stream);
      else
        spin_cycles((long long)clock_khz / 20, 1, 32, stream);
      {
        struct Opener {  // opens the gate once the batch is enqueued, or when enqueueing threw (a no-op after a spin)
          HostGate& g;
          ~Opener() { g.open(); }
        } opener{*gate};
        ev.record_start(stream);
        for (int r = 0; r < kRuns; ++r) CUBLAS_CHECK(run(i));
        ev.record_stop(stream);
      }
      const float ms = ev.elapsed_ms();
      if (held > 0) CUDA_CHECK(cudaStreamSynchronize(hold_stream));
      if (gated && gate->timed_out()) gate_timed_out = true;
      return ms;
    };
    // Every candidate's batches in kRounds interleaved rounds; false when the gate timed out
    // meanwhile (that batch timed the host, and the earlier ones were timed another way).
    auto all_rounds = [&] {
      const bool gated = !gate_timed_out;
      for (int round = 0; round < kRounds; ++round)
        for (int i = 0; i < found; ++i) {
          if (best_ms[i] < 0) continue;
          const float ms = time_batch(i);
          if (gated && gate_timed_out) return false;
          if (round == 0 || ms < best_ms[i]) best_ms[i] = ms;  // round 0 overwrites an aborted pass's
        }
      return true;
    };
    if (!all_rounds()) {
      std::fprintf(stderr,
                   "%s: cuBLASLt autotuning: a timed batch was not released within its limit (launches that "
                   "wait for each kernel?); its candidates are timed behind a spin kernel from now on\n",
                   launcher_rank_label().c_str());
      all_rounds();  // from the start, every batch behind the spin
    }
    int best = 0;
    for (int i = 0; i < found; ++i)
      if (best_ms[i] >= 0 && (best_ms[best] < 0 || best_ms[i] < best_ms[best])) best = i;
    if (best_ms[best] >= 0) p.tuned_ms = best_ms[best] / kRuns;
    if (best_ms[0] >= 0) p.first_ms = best_ms[0] / kRuns;
    return best;
  }

  // Validates the arguments, finds (or builds) the plan; nullptr when unsupported. With
  // dev_scalars, alpha and beta are read from there on the device (beta counts as non-zero).
  Plan* prepare(const GemmTypes& t, bool trans_a, bool trans_b, int m, int n, int k, float alpha, const void* a,
                int lda, const void* b, int ldb, float beta, const void*& c, int& ldc, void* d, int ldd,
                const void* bias, void* a_row_sums, const void*& epi_ptr, const float* dev_scalars = nullptr,
                bool tf32_term = false) {
    if (dev_scalars && !c) throw std::invalid_argument("LtGemm::gemm: device alpha/beta need C");
    if (bias && a_row_sums)
      throw std::invalid_argument("LtGemm::gemm: bias and a_row_sums are exclusive");
    const bool types_ok = (t.ab == CUDA_R_32F && t.cd == CUDA_R_32F) ||
                          (t.ab == CUDA_R_16BF && (t.cd == CUDA_R_16BF || t.cd == CUDA_R_32F));
    if (!types_ok)
      throw std::invalid_argument("LtGemm::gemm: unsupported element types " +
                                  shape_string(t, trans_a, trans_b, m, n, k, lda, ldb, ldc, ldd));
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
                                  shape_string(t, trans_a, trans_b, m, n, k, lda, ldb, ldc, ldd));
    const int epi_kind = bias ? 1 : a_row_sums ? 2 : 0;
    epi_ptr = bias ? bias : static_cast<const void*>(a_row_sums);
    const PlanKey key =
        std::make_tuple(trans_a, trans_b, m, n, k, lda, ldb, ldc, ldd, dev_scalars || beta != 0.0f, epi_kind,
                        alignment_of(a), alignment_of(b), alignment_of(c), alignment_of(d), static_cast<int>(t.ab),
                        static_cast<int>(t.cd), sm_target, dev_scalars != nullptr, tf32_term);
    Plan& p = plan_for(key, Operands{a, b, c, d, epi_ptr, alpha, beta, dev_scalars});
    return p.supported ? &p : nullptr;
  }

  // The 3xTF32 form of an fp32 GEMM (LtGemmOptions::tf32x3_scratch_bytes); false where the BGRADB
  // epilogue is asked for.
  bool tf32x3_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
                   float beta, const float* c, int ldc, float* d, int ldd, const float* bias, float* a_row_sums) {
    if (a_row_sums) return false;  // BGRADB would sum the hi and lo halves as three separate row sums
    const int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;  // stored shapes
    // Checked here, before the splits are enqueued, so a refusal names the caller's shape.
    const bool c_used = beta != 0.0f;
    if (m < 1 || n < 1 || k < 1 || !a || !b || !d || lda < ac || ldb < bc || ldd < n || (c_used && !c) ||
        (c_used && (ldc < n || (c == d && ldc != ldd))))
      throw std::invalid_argument("LtGemm: bad arguments " +
                                  shape_string(GemmTypes{}, ta, tb, m, n, k, lda, ldb, ldc, ldd));
    const size_t need = tf32x3_scratch_bytes(m, n, k);
    if (need > split_bytes)
      throw std::logic_error("LtGemm: the 3xTF32 scratch holds " + std::to_string(split_bytes) + " bytes, " +
                             shape_string(GemmTypes{}, ta, tb, m, n, k, lda, ldb, ldc, ldd) + " needs " +
                             std::to_string(need));
    float* const a_hi = split;
    float* const a_lo = a_hi + split_floats(ar, ac);
    float* const b_hi = a_lo + split_floats(ar, ac);
    float* const b_lo = b_hi + split_floats(br, bc);
    split_operand(a, ar, ac, lda, a_hi, a_lo);
    split_operand(b, br, bc, ldb, b_hi, b_lo);
    // D = alpha * A_lo B_hi + beta * C, D += alpha * A_hi B_lo, D += alpha * A_hi B_hi (+ bias).
    tf32_term(ta, tb, m, n, k, alpha, a_lo, ac, b_hi, bc, beta, c, ldc, d, ldd, nullptr);
    tf32_term(ta, tb, m, n, k, alpha, a_hi, ac, b_lo, bc, 1.0f, d, ldd, d, ldd, nullptr);
    tf32_term(ta, tb, m, n, k, alpha, a_hi, ac, b_hi, bc, 1.0f, d, ldd, d, ldd, bias);
    return true;
  }

  void split_operand(const float* x, int rows, int cols, int ld, float* hi, float* lo) {
    const size_t n = (size_t)rows * cols;
    const int blocks = (int)std::min<size_t>((n + 255) / 256, (size_t)device_sms * 16);
    split_tf32_kernel<<<blocks, 256, 0, stream>>>(x, rows, cols, ld, hi, lo);
    CUDA_CHECK(cudaGetLastError());
  }

  void tf32_term(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
                 float beta, const float* c, int ldc, float* d, int ldd, const float* bias) {
    const void* cc = c;
    const void* epi_ptr = nullptr;
    Plan* p = prepare(GemmTypes{}, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, cc, ldc, d, ldd, bias, nullptr,
                      epi_ptr, nullptr, true);
    if (!p)
      throw std::runtime_error(launcher_rank_label() + ": cuBLASLt found no TF32 algorithm for the 3xTF32 term " +
                               shape_string(GemmTypes{}, ta, tb, m, n, k, lda, ldb, ldc, ldd));
    enqueue(*p, Operands{a, b, cc, d, epi_ptr, alpha, beta, nullptr});
  }

  // Milliseconds between timed call i's events (waits for its end event).
  double timed_call_ms(size_t i) {
    CUDA_CHECK(cudaEventSynchronize(timed[i].end));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, timed[i].start, timed[i].end));
    return ms;
  }

  void enqueue(Plan& p, const Operands& ops) {
    const void* const epi_ptr = ops.epi_ptr;
    if (epi_ptr)
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &epi_ptr,
                                                  sizeof(epi_ptr)));
    TimedCall* ev = nullptr;
    if (timing) {
      if (timed_used == timed.size()) {
        TimedCall e;
        CUDA_CHECK(cudaEventCreate(&e.start));
        const cudaError_t err = cudaEventCreate(&e.end);
        if (err != cudaSuccess) cudaEventDestroy(e.start);
        CUDA_CHECK(err);
        timed.push_back(e);
      }
      ev = &timed[timed_used++];
      ev->plan = &p;
      CUDA_CHECK(cudaEventRecord(ev->start, stream));
    }
    CUBLAS_CHECK(cublasLtMatmul(handle, p.op, alpha_ptr(ops), ops.b, p.a, ops.a, p.b, beta_ptr(ops), ops.c, p.c, ops.d,
                                p.d, &p.algo, workspace, workspace_bytes, stream));
    if (ev) CUDA_CHECK(cudaEventRecord(ev->end, stream));
  }
};

LtGemm::LtGemm(cudaStream_t stream, const LtGemmOptions& o) : impl_(new Impl) {
  if (o.compute != CUBLAS_COMPUTE_32F && o.compute != CUBLAS_COMPUTE_32F_PEDANTIC &&
      o.compute != CUBLAS_COMPUTE_32F_FAST_TF32)
    throw std::invalid_argument(
        "LtGemm: compute type must be CUBLAS_COMPUTE_32F, _32F_PEDANTIC or _32F_FAST_TF32");
  const size_t workspace_bytes = o.workspace_bytes;
  impl_->stream = stream;
  impl_->compute = o.compute;
  impl_->autotune = o.autotune_candidates;
  if (o.autotune_gate_cycles < 0) throw std::invalid_argument("LtGemm: autotune_gate_cycles must be >= 0");
  impl_->gate_cycles = o.autotune_gate_cycles;
  CUBLAS_CHECK(cublasLtCreate(&impl_->handle));
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&impl_->device_sms, cudaDevAttrMultiProcessorCount, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&impl_->clock_khz, cudaDevAttrClockRate, dev));
  impl_->workspace_bytes = workspace_bytes;
  if (workspace_bytes > 0)
    impl_->workspace = impl_->arena.alloc<char>(workspace_bytes, "cuBLASLt workspace");
  if (o.tf32x3_scratch_bytes > 0) {
    impl_->split_bytes = o.tf32x3_scratch_bytes;
    impl_->split = impl_->arena.alloc<float>((o.tf32x3_scratch_bytes + 3) / 4, "3xTF32 operand split");
  }
}

size_t tf32x3_scratch_bytes(int m, int n, int k) { return 2 * (split_floats(m, k) + split_floats(k, n)) * 4; }

LtGemm::~LtGemm() = default;

size_t LtGemm::device_bytes() const { return impl_->arena.bytes(); }
size_t LtGemm::plan_count() const { return impl_->plans.size(); }
void* LtGemm::workspace() const { return impl_->workspace; }
size_t LtGemm::workspace_bytes() const { return impl_->workspace_bytes; }
cublasComputeType_t LtGemm::compute_type() const { return impl_->compute; }

void LtGemm::set_sm_count_target(int n) {
  if (n < 0 || n > impl_->device_sms)
    throw std::invalid_argument("LtGemm::set_sm_count_target: " + std::to_string(n) + " outside [0, " +
                                std::to_string(impl_->device_sms) + "] (the device's SM count)");
  impl_->sm_target = n;
}
int LtGemm::sm_count_target() const { return impl_->sm_target; }
bool LtGemm::autotune_gate_timed_out() const { return impl_->gate_timed_out; }
int LtGemm::device_sm_count() const { return impl_->device_sms; }

void LtGemm::set_timing(bool on) { impl_->timing = on; }

double LtGemm::take_timed_ms() {
  double total = 0;
  for (size_t i = 0; i < impl_->timed_used; ++i) total += impl_->timed_call_ms(i);
  impl_->timed_used = 0;
  return total;
}

std::vector<TimedGemm> LtGemm::take_timed_calls() {
  std::vector<TimedGemm> calls;
  for (size_t i = 0; i < impl_->timed_used; ++i) {
    const Plan& p = *impl_->timed[i].plan;
    calls.push_back(TimedGemm{p.shape, algo_string(p.algo), impl_->timed_call_ms(i), p.tuned_ms, p.first_ms});
  }
  impl_->timed_used = 0;
  return calls;
}

void LtGemm::gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                  int lda, const float* b, int ldb, float beta, const float* c, int ldc, float* d,
                  int ldd, const float* bias, float* a_row_sums) {
  gemm(GemmTypes{}, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, d, ldd, bias,
       a_row_sums);
}

void LtGemm::gemm(const GemmTypes& types, bool trans_a, bool trans_b, int m, int n, int k,
                  float alpha, const void* a, int lda, const void* b, int ldb, float beta,
                  const void* c, int ldc, void* d, int ldd, const void* bias, void* a_row_sums) {
  const int ldc_in = ldc;
  if (!try_gemm(types, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, d, ldd, bias,
                a_row_sums))
    throw std::runtime_error(
        launcher_rank_label() + ": cuBLASLt found no algorithm for " +
        shape_string(types, trans_a, trans_b, m, n, k, lda, ldb, ldc_in, ldd) +
        (bias ? " with bias epilogue" : a_row_sums ? " with bias-gradient epilogue" : ""));
}

bool LtGemm::try_gemm(const GemmTypes& types, bool trans_a, bool trans_b, int m, int n, int k,
                      float alpha, const void* a, int lda, const void* b, int ldb, float beta,
                      const void* c, int ldc, void* d, int ldd, const void* bias, void* a_row_sums) {
  if (impl_->split && types.ab == CUDA_R_32F) {
    if (types.cd != CUDA_R_32F)
      throw std::invalid_argument("LtGemm::gemm: unsupported element types " +
                                  shape_string(types, trans_a, trans_b, m, n, k, lda, ldb, ldc, ldd));
    return impl_->tf32x3_gemm(trans_a, trans_b, m, n, k, alpha, static_cast<const float*>(a), lda,
                              static_cast<const float*>(b), ldb, beta, static_cast<const float*>(c), ldc,
                              static_cast<float*>(d), ldd, static_cast<const float*>(bias),
                              static_cast<float*>(a_row_sums));
  }
  const void* epi_ptr = nullptr;
  Plan* p = impl_->prepare(types, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
                           d, ldd, bias, a_row_sums, epi_ptr);
  if (!p) return false;
  impl_->enqueue(*p, Operands{a, b, c, d, epi_ptr, alpha, beta, nullptr});
  return true;
}

void LtGemm::gemm_device_scalars(const GemmTypes& types, bool trans_a, bool trans_b, int m, int n, int k,
                                 const float* d_alpha_beta, const void* a, int lda, const void* b, int ldb,
                                 const void* c, int ldc, void* d, int ldd) {
  if (!d_alpha_beta) throw std::invalid_argument("LtGemm::gemm_device_scalars: d_alpha_beta is null");
  if (impl_->split && types.ab == CUDA_R_32F)
    throw std::invalid_argument("LtGemm::gemm_device_scalars: not with the 3xTF32 mode (fp32 operands)");
  const int ldc_in = ldc;
  const void* epi_ptr = nullptr;
  Plan* p = impl_->prepare(types, trans_a, trans_b, m, n, k, 0.0f, a, lda, b, ldb, 1.0f, c, ldc, d, ldd, nullptr,
                           nullptr, epi_ptr, d_alpha_beta);
  if (!p)
    throw std::runtime_error(launcher_rank_label() + ": cuBLASLt found no algorithm for " +
                             shape_string(types, trans_a, trans_b, m, n, k, lda, ldb, ldc_in, ldd) +
                             " with device alpha and beta");
  impl_->enqueue(*p, Operands{a, b, c, d, nullptr, 0.0f, 1.0f, d_alpha_beta});
}

// ---- nn.Linear forms ----
namespace {
constexpr GemmTypes kF32{CUDA_R_32F, CUDA_R_32F};
constexpr GemmTypes kBF16{CUDA_R_16BF, CUDA_R_16BF};
constexpr GemmTypes kBF16toF32{CUDA_R_16BF, CUDA_R_32F};

void forward_impl(LtGemm& lt, const GemmTypes& t, const void* x, const void* w, const void* bias,
                  const void* residual, void* y, int m, int n, int k, int ldx) {
  lt.gemm(t, false, true, m, n, k, 1.0f, x, ldx > 0 ? ldx : k, w, k, residual ? 1.0f : 0.0f,
          residual, n, y, n, bias);
}

void weight_impl(LtGemm& lt, const GemmTypes& t, const void* dy, const void* x, float* dw, int m,
                 int n, int k, bool accumulate, int ldx) {
  lt.gemm(t, true, false, n, k, m, 1.0f, dy, n, x, ldx > 0 ? ldx : k, accumulate ? 1.0f : 0.0f,
          accumulate ? dw : nullptr, k, dw, k);
}

bool weight_bias_impl(LtGemm& lt, const GemmTypes& t, const void* dy, const void* x, float* dw,
                      float* db, int m, int n, int k, int ldx) {
  return lt.try_gemm(t, true, false, n, k, m, 1.0f, dy, n, x, ldx > 0 ? ldx : k, 0.0f, nullptr, k,
                     dw, k, nullptr, db);
}

void update_impl(LtGemm& lt, const GemmTypes& t, const void* dy, const void* x, float* w, const float* d_alpha_beta,
                 int m, int n, int k, int ldx) {
  lt.gemm_device_scalars(t, true, false, n, k, m, d_alpha_beta, dy, n, x, ldx > 0 ? ldx : k, w, k, w, k);
}

void input_impl(LtGemm& lt, const GemmTypes& t, const void* dy, const void* w, void* dx, int m,
                int n, int k) {
  lt.gemm(t, false, false, m, k, n, 1.0f, dy, n, w, k, 0.0f, nullptr, k, dx, k);
}
}  // namespace

void linear_forward(LtGemm& lt, const float* x, const float* w, const float* bias,
                    const float* residual, float* y, int m, int n, int k, int ldx) {
  forward_impl(lt, kF32, x, w, bias, residual, y, m, n, k, ldx);
}
void linear_forward(LtGemm& lt, const __nv_bfloat16* x, const __nv_bfloat16* w,
                    const __nv_bfloat16* bias, const __nv_bfloat16* residual, __nv_bfloat16* y,
                    int m, int n, int k, int ldx) {
  forward_impl(lt, kBF16, x, w, bias, residual, y, m, n, k, ldx);
}
void linear_forward(LtGemm& lt, const __nv_bfloat16* x, const __nv_bfloat16* w, const float* bias,
                    const float* residual, float* y, int m, int n, int k, int ldx) {
  forward_impl(lt, kBF16toF32, x, w, bias, residual, y, m, n, k, ldx);
}

void linear_backward_weight(LtGemm& lt, const float* dy, const float* x, float* dw, int m, int n,
                            int k, bool accumulate, int ldx) {
  weight_impl(lt, kF32, dy, x, dw, m, n, k, accumulate, ldx);
}
void linear_backward_weight(LtGemm& lt, const __nv_bfloat16* dy, const __nv_bfloat16* x, float* dw,
                            int m, int n, int k, bool accumulate, int ldx) {
  weight_impl(lt, kBF16toF32, dy, x, dw, m, n, k, accumulate, ldx);
}

bool linear_backward_weight_bias(LtGemm& lt, const float* dy, const float* x, float* dw, float* db,
                                 int m, int n, int k, int ldx) {
  return weight_bias_impl(lt, kF32, dy, x, dw, db, m, n, k, ldx);
}
bool linear_backward_weight_bias(LtGemm& lt, const __nv_bfloat16* dy, const __nv_bfloat16* x,
                                 float* dw, float* db, int m, int n, int k, int ldx) {
  return weight_bias_impl(lt, kBF16toF32, dy, x, dw, db, m, n, k, ldx);
}

void linear_update_weight(LtGemm& lt, const float* dy, const float* x, float* w, const float* d_alpha_beta, int m,
                          int n, int k, int ldx) {
  update_impl(lt, kF32, dy, x, w, d_alpha_beta, m, n, k, ldx);
}
void linear_update_weight(LtGemm& lt, const __nv_bfloat16* dy, const __nv_bfloat16* x, float* w,
                          const float* d_alpha_beta, int m, int n, int k, int ldx) {
  update_impl(lt, kBF16toF32, dy, x, w, d_alpha_beta, m, n, k, ldx);
}

void linear_backward_input(LtGemm& lt, const float* dy, const float* w, float* dx, int m, int n,
                           int k) {
  input_impl(lt, kF32, dy, w, dx, m, n, k);
}
void linear_backward_input(LtGemm& lt, const __nv_bfloat16* dy, const __nv_bfloat16* w,
                           __nv_bfloat16* dx, int m, int n, int k) {
  input_impl(lt, kBF16, dy, w, dx, m, n, k);
}

}  // namespace vitddp
