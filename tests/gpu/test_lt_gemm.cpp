// The cuBLASLt GEMMs of cuda/kernels/lt_gemm.h (LtGemm, linear_forward, linear_backward_weight /
// _bias, linear_backward_input) in fp32, bf16 operands and TF32 compute, against host_gemm of
// tests/gpu/gemm_reference.h in double (on the same bf16-rounded inputs for bf16). CPU twin: the
// linear layers of model/cpu_vit.cpp (linear_fwd, linear_bwd, gemm_acc).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/kernels/lt_gemm.h"
#include "tests/catch.h"
#include "tests/gpu/bf16_test_util.h"
#include "tests/gpu/gemm_reference.h"
#include "tests/gpu/gpu_test_util.h"

using namespace vitddp;
using namespace vitddp_test;
using bf16 = __nv_bfloat16;

TEST_CASE("lt_gemm: nn.Linear forward, weight gradient and input gradient match host loops",
          "[gpu][lt_gemm]") {
  REQUIRE_GPU();
  Stream st;
  LtGemm lt(st.s);
  struct Shape { int m, n, k; };
  for (const Shape sh : {Shape{37, 29, 45}, Shape{200, 256, 512}, Shape{4, 1000, 768}}) {
    const int M = sh.m, N = sh.n, K = sh.k, ldx = K + 3;
    INFO("M=" << M << " N=" << N << " K=" << K);
    const auto hx = normal_vec((size_t)M * ldx, 1, 0), hw = normal_vec((size_t)N * K, 1, 1),
               hb = normal_vec(N, 1, 2), hr = normal_vec((size_t)M * N, 1, 3),
               hdy = normal_vec((size_t)M * N, 1, 4), hdw0 = normal_vec((size_t)N * K, 1, 5);
    DevVec<float> x(hx), w(hw), b(hb), r(hr), dy(hdy), y((size_t)M * N), dw(hdw0),
        dx((size_t)M * K);

    // Y = X W^T + b + R (X strided), and Y = X W^T alone.
    linear_forward(lt, x.get(), w.get(), b.get(), r.get(), y.get(), M, N, K, ldx);
    CHECK(norm_rel_err(y.download(), host_gemm(false, true, M, N, K, 1, hx, ldx, hw, K, 1, &hr, N, &hb)) < 1e-6);
    linear_forward(lt, x.get(), w.get(), nullptr, nullptr, y.get(), M, N, K, ldx);
    CHECK(norm_rel_err(y.download(), host_gemm(false, true, M, N, K, 1, hx, ldx, hw, K, 0, nullptr, N, nullptr)) < 1e-6);
    // In-place residual: Y = X W^T + b + Y.
    y.upload(hr);
    linear_forward(lt, x.get(), w.get(), b.get(), y.get(), y.get(), M, N, K, ldx);
    CHECK(norm_rel_err(y.download(), host_gemm(false, true, M, N, K, 1, hx, ldx, hw, K, 1, &hr, N, &hb)) < 1e-6);

    // dW += dY^T X, then dW = dY^T X.
    linear_backward_weight(lt, dy.get(), x.get(), dw.get(), M, N, K, true, ldx);
    CHECK(norm_rel_err(dw.download(), host_gemm(true, false, N, K, M, 1, hdy, N, hx, ldx, 1, &hdw0, K, nullptr)) < 1e-6);
    linear_backward_weight(lt, dy.get(), x.get(), dw.get(), M, N, K, false, ldx);
    const auto ref_dw = host_gemm(true, false, N, K, M, 1, hdy, N, hx, ldx, 0, nullptr, K, nullptr);
    CHECK(norm_rel_err(dw.download(), ref_dw) < 1e-6);

    // dX = dY W.
    linear_backward_input(lt, dy.get(), w.get(), dx.get(), M, N, K);
    CHECK(norm_rel_err(dx.download(), host_gemm(false, false, M, K, N, 1, hdy, N, hw, K, 0, nullptr, K, nullptr)) < 1e-6);

    // General form with both transposes and alpha/beta: D = 0.5 A^T B^T + 2 C.
    const auto ha = normal_vec((size_t)K * M, 2, 0), hbb = normal_vec((size_t)N * K, 2, 1);
    DevVec<float> a2(ha), b2(hbb), c2(hr), d2((size_t)M * N);
    lt.gemm(true, true, M, N, K, 0.5f, a2.get(), M, b2.get(), K, 2.0f, c2.get(), N, d2.get(), N);
    CHECK(norm_rel_err(d2.download(), host_gemm(true, true, M, N, K, 0.5, ha, M, hbb, K, 2, &hr, N, nullptr)) < 1e-6);

    // dW = dY^T X with the bias gradient db[n] = sum_m dY[m, n] fused (BGRADB epilogue).
    {
      DevVec<float> db(N);
      lt.gemm(true, false, N, K, M, 1.0f, dy.get(), N, x.get(), ldx, 0.0f, nullptr, K, dw.get(), K,
              nullptr, db.get());
      std::vector<double> ref_db(N, 0.0);
      for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) ref_db[j] += hdy[(size_t)i * N + j];
      CHECK(norm_rel_err(dw.download(), ref_dw) < 1e-6);
      CHECK(norm_rel_err(db.download(), ref_db) < 1e-6);
    }
    // Repeated calls reuse the cached plans.
    const size_t plans = lt.plan_count();
    linear_backward_weight(lt, dy.get(), x.get(), dw.get(), M, N, K, false, ldx);
    CHECK(lt.plan_count() == plans);
    CHECK(norm_rel_err(dw.download(), ref_dw) < 1e-6);
  }
  // A reduced SM count target (autotuned while another stream holds the other SMs) gives a new
  // plan per shape and the same products.
  {
    LtGemm tuned(st.s, LtGemmOptions{size_t(32) << 20, CUBLAS_COMPUTE_32F, 8});
    const int M = 200, N = 256, K = 512;
    const auto hx = normal_vec((size_t)M * K, 3, 0), hw = normal_vec((size_t)N * K, 3, 1);
    DevVec<float> x(hx), w(hw), y((size_t)M * N);
    const auto ref = host_gemm(false, true, M, N, K, 1, hx, K, hw, K, 0, nullptr, N, nullptr);
    auto product = [&] {  // y cleared first, so a GEMM that did not run cannot pass
      CUDA_CHECK(cudaMemset(y.get(), 0, (size_t)M * N * sizeof(float)));
      linear_forward(tuned, x.get(), w.get(), nullptr, nullptr, y.get(), M, N, K);
      return norm_rel_err(y.download(), ref);
    };
    CHECK(product() < 1e-6);
    CHECK(tuned.plan_count() == 1);
    tuned.set_sm_count_target(tuned.device_sm_count() / 2);  // tuned while the other half is held
    CHECK(tuned.sm_count_target() == tuned.device_sm_count() / 2);
    CHECK(product() < 1e-6);
    CHECK(tuned.plan_count() == 2);
    tuned.set_sm_count_target(0);
    CHECK(product() < 1e-6);
    CHECK(tuned.plan_count() == 2);
    CHECK_THROWS_AS(tuned.set_sm_count_target(-1), std::invalid_argument);
    CHECK_THROWS_AS(tuned.set_sm_count_target(tuned.device_sm_count() + 1), std::invalid_argument);
  }
  CHECK_THROWS_AS(lt.gemm(false, false, 4, 4, 4, 1, nullptr, 4, nullptr, 4, 0, nullptr, 4, nullptr, 4),
                  std::invalid_argument);
  CHECK_THROWS_AS(linear_forward(lt, static_cast<const float*>(nullptr), nullptr, nullptr, nullptr, nullptr, 4, 4, 0),
                  std::invalid_argument);
}

TEST_CASE("lt_gemm: bf16 operands with bf16 and fp32 outputs, TF32 compute", "[gpu][lt_gemm][bf16]") {
  REQUIRE_GPU();
  Stream st;
  LtGemmOptions o32;
  o32.compute = CUBLAS_COMPUTE_32F;
  LtGemm lt(st.s, o32);
  struct Shape { int m, n, k; };
  for (const Shape sh : {Shape{37, 24, 48}, Shape{200, 256, 512}, Shape{4, 1000, 768}}) {
    const int M = sh.m, N = sh.n, K = sh.k;
    INFO("M=" << M << " N=" << N << " K=" << K);
    const auto hx = rounded(normal_vec((size_t)M * K, 21, 0)), hw = rounded(normal_vec((size_t)N * K, 21, 1)),
               hb = rounded(normal_vec(N, 21, 2)), hr = normal_vec((size_t)M * N, 21, 3),
               hdy = rounded(normal_vec((size_t)M * N, 21, 4)), hdw0 = normal_vec((size_t)N * K, 21, 5);
    DevVec<bf16> x(to_bf16(hx)), w(to_bf16(hw)), b16(to_bf16(hb)), dy(to_bf16(hdy)), y16((size_t)M * N),
        dx16((size_t)M * K);
    DevVec<float> b32(hb), r(hr), y32((size_t)M * N), dw(hdw0), db(N);

    // Y(bf16) = X W^T + b(bf16): one rounding of an fp32-accumulated result.
    linear_forward(lt, x.get(), w.get(), b16.get(), nullptr, y16.get(), M, N, K);
    const auto ref_y = host_gemm(false, true, M, N, K, 1, hx, K, hw, K, 0, nullptr, N, &hb);
    CHECK(norm_rel_err(to_float(y16.download()), ref_y) < 4e-3);
    // Y(fp32) = X W^T + b(fp32) + R(fp32): exact products, fp32 accumulation.
    linear_forward(lt, x.get(), w.get(), b32.get(), r.get(), y32.get(), M, N, K);
    CHECK(norm_rel_err(y32.download(), host_gemm(false, true, M, N, K, 1, hx, K, hw, K, 1, &hr, N, &hb)) < 1e-5);
    // dW(fp32) += dY^T X, then the BGRADB form (or its fallback) dW = dY^T X, db = colsum(dY).
    linear_backward_weight(lt, dy.get(), x.get(), dw.get(), M, N, K, true);
    CHECK(norm_rel_err(dw.download(), host_gemm(true, false, N, K, M, 1, hdy, N, hx, K, 1, &hdw0, K, nullptr)) < 1e-5);
    const auto ref_dw = host_gemm(true, false, N, K, M, 1, hdy, N, hx, K, 0, nullptr, K, nullptr);
    std::vector<double> ref_db(N, 0.0);
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) ref_db[j] += hdy[(size_t)i * N + j];
    const bool fused = linear_backward_weight_bias(lt, dy.get(), x.get(), dw.get(), db.get(), M, N, K);
    std::printf("lt_gemm bf16 BGRADB epilogue (M=%d N=%d K=%d): %s\n", M, N, K,
                fused ? "supported" : "not offered by cuBLASLt (column_sum fallback)");
    if (fused) {
      CHECK(norm_rel_err(dw.download(), ref_dw) < 1e-5);
      CHECK(norm_rel_err(db.download(), ref_db) < 1e-5);
    }
    // dX(bf16) = dY W.
    linear_backward_input(lt, dy.get(), w.get(), dx16.get(), M, N, K);
    CHECK(norm_rel_err(to_float(dx16.download()), host_gemm(false, false, M, K, N, 1, hdy, N, hw, K, 0, nullptr, K, nullptr)) < 4e-3);
  }
  // Unsupported type combinations are refused before reaching cuBLASLt.
  DevVec<float> f(16);
  CHECK_THROWS_AS(lt.gemm(GemmTypes{CUDA_R_32F, CUDA_R_16BF}, false, false, 4, 4, 4, 1, f.get(), 4,
                          f.get(), 4, 0, nullptr, 4, f.get(), 4),
                  std::invalid_argument);

  // TF32: fp32 operands rounded to 10-bit mantissas, fp32 accumulation: about 1e-3 relative.
  LtGemmOptions otf;
  otf.compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  LtGemm tf(st.s, otf);
  const int M = 300, N = 256, K = 1024;
  const auto hx = normal_vec((size_t)M * K, 22, 0), hw = normal_vec((size_t)N * K, 22, 1);
  DevVec<float> x(hx), w(hw), y((size_t)M * N);
  linear_forward(tf, x.get(), w.get(), nullptr, nullptr, y.get(), M, N, K);
  const double e = norm_rel_err(y.download(), host_gemm(false, true, M, N, K, 1, hx, K, hw, K, 0, nullptr, N, nullptr));
  std::printf("lt_gemm TF32 %dx%dx%d norm-rel error %.3g\n", M, N, K, e);
  CHECK(e < 2e-3);
  CHECK(e > 2e-5);  // TF32 is really on (strict fp32 gives about 1e-7)

  // GEMM timing: events around each GEMM, summed and reset by take_timed_ms().
  tf.set_timing(true);
  for (int i = 0; i < 3; ++i) linear_forward(tf, x.get(), w.get(), nullptr, nullptr, y.get(), M, N, K);
  const double ms = tf.take_timed_ms();
  CHECK(ms > 0);
  CHECK(tf.take_timed_ms() == 0);
  // One by one: the shape and algorithm of each call; not autotuned, so no autotuning times.
  linear_forward(tf, x.get(), w.get(), nullptr, nullptr, y.get(), M, N, K);
  const std::vector<TimedGemm> calls = tf.take_timed_calls();
  REQUIRE(calls.size() == 1);
  CHECK(calls[0].ms > 0);
  CHECK(calls[0].shape.find("m=300, n=256, k=1024") != std::string::npos);
  CHECK(calls[0].algo.rfind("algo ", 0) == 0);
  CHECK(calls[0].algo.find('?') == std::string::npos);  // every configuration attribute was read
  CHECK(calls[0].tuned_ms == -1);
  CHECK(calls[0].first_ms == -1);
  CHECK(tf.take_timed_calls().empty());
  tf.set_timing(false);
}

namespace {
// The autotuned times travel with a timed call of Y = X W^T (a plan already autotuned): the kept
// candidate is never slower than the heuristic's first, and both are GPU times of a small GEMM.
void check_autotuned_times(LtGemm& lt, const float* x, const float* w, float* y, int M, int N, int K) {
  lt.set_timing(true);
  linear_forward(lt, x, w, nullptr, nullptr, y, M, N, K);
  const std::vector<TimedGemm> calls = lt.take_timed_calls();
  lt.set_timing(false);
  REQUIRE(calls.size() == 1);
  CHECK(calls[0].tuned_ms > 0);
  CHECK(calls[0].first_ms > 0);  // -1 would mean cuBLASLt's first candidate was not timed
  CHECK(calls[0].first_ms >= calls[0].tuned_ms);
  CHECK(calls[0].tuned_ms < 1.0);  // a 200 x 256 x 512 GEMM takes microseconds, not a millisecond
}
}  // namespace

TEST_CASE("lt_gemm: autotuning times candidates on D itself, or on a temporary when D is also C (in place)",
          "[gpu][lt_gemm]") {
  REQUIRE_GPU();
  Stream st;
  LtGemmOptions o;
  o.autotune_candidates = 8;
  LtGemm lt(st.s, o);
  const int M = 200, N = 256, K = 512;
  const auto hx = normal_vec((size_t)M * K, 7, 0), hw = normal_vec((size_t)N * K, 7, 1), hb = normal_vec(N, 7, 2),
             hr = normal_vec((size_t)M * N, 7, 3), hdy = normal_vec((size_t)M * N, 7, 4),
             hdw0 = normal_vec((size_t)N * K, 7, 5);
  const auto y_res = host_gemm(false, true, M, N, K, 1, hx, K, hw, K, 1, &hr, N, &hb),
             y_plain = host_gemm(false, true, M, N, K, 1, hx, K, hw, K, 0, nullptr, N, nullptr),
             dw_acc = host_gemm(true, false, N, K, M, 1, hdy, N, hx, K, 1, &hdw0, K, nullptr),
             dw_set = host_gemm(true, false, N, K, M, 1, hdy, N, hx, K, 0, nullptr, K, nullptr);
  // The first call of each plan times its candidates. The in-place ones come first: a candidate
  // that wrote D while D is also C would add the product to it once per timed run.
  for (int rep = 0; rep < 2; ++rep) {  // rep 1: the plans built by rep 0, no timing
    INFO("round " << rep);
    DevVec<float> x(hx), w(hw), b(hb), r(hr), dy(hdy), y(hr), dw(hdw0);
    linear_forward(lt, x.get(), w.get(), b.get(), y.get(), y.get(), M, N, K);  // Y = X W^T + b + Y
    CHECK(norm_rel_err(y.download(), y_res) < 1e-6);
    linear_forward(lt, x.get(), w.get(), b.get(), r.get(), y.get(), M, N, K);  // the same plan, C separate
    CHECK(norm_rel_err(y.download(), y_res) < 1e-6);
    linear_forward(lt, x.get(), w.get(), nullptr, nullptr, y.get(), M, N, K);  // a new plan, timed on D
    CHECK(norm_rel_err(y.download(), y_plain) < 1e-6);
    linear_backward_weight(lt, dy.get(), x.get(), dw.get(), M, N, K, true);  // dW += dY^T X, in place
    CHECK(norm_rel_err(dw.download(), dw_acc) < 1e-6);
    linear_backward_weight(lt, dy.get(), x.get(), dw.get(), M, N, K, false);  // dW = dY^T X, timed on D
    CHECK(norm_rel_err(dw.download(), dw_set) < 1e-6);
  }
  CHECK(lt.plan_count() == 4);  // forward with bias and C, forward alone, dW accumulated, dW set

  DevVec<float> x(hx), w(hw), y((size_t)M * N);
  check_autotuned_times(lt, x.get(), w.get(), y.get(), M, N, K);
}

TEST_CASE("lt_gemm: autotuning whose gate times out times the batches behind a spin instead, with the same results",
          "[gpu][lt_gemm]") {
  REQUIRE_GPU();
  Stream st;
  LtGemmOptions o;
  o.autotune_candidates = 8;
  o.autotune_gate_cycles = 1;  // the first gate gives up at once: the plan is timed again behind the spin
  LtGemm lt(st.s, o);
  CHECK_FALSE(lt.autotune_gate_timed_out());
  const int M = 200, N = 256, K = 512;
  const auto hx = normal_vec((size_t)M * K, 8, 0), hw = normal_vec((size_t)N * K, 8, 1),
             hr = normal_vec((size_t)M * N, 8, 2);
  DevVec<float> x(hx), w(hw), y(hr);
  linear_forward(lt, x.get(), w.get(), nullptr, y.get(), y.get(), M, N, K);  // Y = X W^T + Y, candidates on a temporary
  CHECK(norm_rel_err(y.download(), host_gemm(false, true, M, N, K, 1, hx, K, hw, K, 1, &hr, N, nullptr)) < 1e-6);
  REQUIRE(lt.autotune_gate_timed_out());
  linear_forward(lt, x.get(), w.get(), nullptr, nullptr, y.get(), M, N, K);  // a second plan, timed on D
  CHECK(norm_rel_err(y.download(), host_gemm(false, true, M, N, K, 1, hx, K, hw, K, 0, nullptr, N, nullptr)) < 1e-6);
  check_autotuned_times(lt, x.get(), w.get(), y.get(), M, N, K);  // behind the spin too they time the GPU
}

TEST_CASE("lt_gemm: linear_update_weight applies W = beta W + alpha dY^T X once, alpha and beta read on the device",
          "[gpu][lt_gemm]") {
  REQUIRE_GPU();
  Stream st;
  LtGemmOptions o;
  o.autotune_candidates = 8;  // the first call times candidates: on a temporary, since D is also C
  LtGemm lt(st.s, o);
  const int M = 200, N = 256, K = 512;
  const auto hx = normal_vec((size_t)M * K, 9, 0), hdy = normal_vec((size_t)M * N, 9, 1),
             hw0 = normal_vec((size_t)N * K, 9, 2);
  DevVec<float> x(hx), dy(hdy), w(hw0), scalars(std::vector<float>{-0.5f, 1.0f});
  std::vector<float> want = hw0;
  for (int step = 0; step < 3; ++step) {  // step 2 with new scalars, written after the plan was built
    INFO("step " << step);
    const float alpha = step < 2 ? -0.5f : 0.25f, beta = step < 2 ? 1.0f : 0.5f;
    if (step == 2) scalars.upload({alpha, beta});
    const std::vector<double> d = host_gemm(true, false, N, K, M, alpha, hdy, N, hx, K, beta, &want, K, nullptr);
    linear_update_weight(lt, dy.get(), x.get(), w.get(), scalars.get(), M, N, K);
    CHECK(norm_rel_err(w.download(), d) < 1e-6);
    want.assign(d.begin(), d.end());
  }
  CHECK(lt.plan_count() == 1);
  CHECK_THROWS_AS(lt.gemm_device_scalars(GemmTypes{}, true, false, N, K, M, nullptr, dy.get(), N, x.get(), K, w.get(),
                                         K, w.get(), K),
                  std::invalid_argument);
}

TEST_CASE("lt_gemm: 3xTF32 mode keeps fp32's accuracy where one TF32 GEMM loses three digits",
          "[gpu][lt_gemm][tf32x3]") {
  REQUIRE_GPU();
  Stream st;
  // Operands with a spread of magnitudes (scale 1 to 100) so TF32's 10-bit mantissa shows.
  const int M = 256, N = 384, K = 2048;
  auto spread = [](size_t n, unsigned seed) {
    std::vector<float> v = normal_vec(n, 1, seed);
    for (size_t i = 0; i < n; ++i) v[i] *= 1.0f + 99.0f * (float)((i * 2654435761u) % 1000) / 1000.0f;
    return v;
  };
  const auto hx = spread((size_t)M * K, 11), hw = spread((size_t)N * K, 12), hb = normal_vec(N, 1, 13),
             hr = normal_vec((size_t)M * N, 1, 14), hdy = spread((size_t)M * N, 15),
             hdw0 = normal_vec((size_t)N * K, 1, 16);
  const auto y_ref = host_gemm(false, true, M, N, K, 1, hx, K, hw, K, 1, &hr, N, &hb),
             dx_ref = host_gemm(false, false, M, K, N, 1, hdy, N, hw, K, 0, nullptr, K, nullptr),
             dw_ref = host_gemm(true, false, N, K, M, 1, hdy, N, hx, K, 1, &hdw0, K, nullptr);
  const size_t scratch =
      std::max({tf32x3_scratch_bytes(M, N, K), tf32x3_scratch_bytes(M, K, N), tf32x3_scratch_bytes(N, K, M)});
  struct Errors {
    double y, dx, dw;
  };
  auto run = [&](cublasComputeType_t compute, size_t split, int autotune) {
    LtGemmOptions o;
    o.compute = compute;
    o.tf32x3_scratch_bytes = split;
    o.autotune_candidates = autotune;
    LtGemm lt(st.s, o);
    DevVec<float> x(hx), w(hw), b(hb), y(hr), dy(hdy), dx((size_t)M * K), dw(hdw0);
    linear_forward(lt, x.get(), w.get(), b.get(), y.get(), y.get(), M, N, K);  // Y = X W^T + b + Y, in place
    linear_backward_input(lt, dy.get(), w.get(), dx.get(), M, N, K);
    linear_backward_weight(lt, dy.get(), x.get(), dw.get(), M, N, K, true);  // dW += dY^T X
    return Errors{norm_rel_err(y.download(), y_ref), norm_rel_err(dx.download(), dx_ref),
                  norm_rel_err(dw.download(), dw_ref)};
  };
  const Errors ieee = run(CUBLAS_COMPUTE_32F_PEDANTIC, 0, 0), tf32 = run(CUBLAS_COMPUTE_32F_FAST_TF32, 0, 0),
               x3 = run(CUBLAS_COMPUTE_32F_PEDANTIC, scratch, 0),
               x3_tuned = run(CUBLAS_COMPUTE_32F_PEDANTIC, scratch, 8);
  std::printf(
      "norm-relative error against double (Y, dX, dW): fp32 %.2e %.2e %.2e | tf32 %.2e %.2e %.2e | 3xTF32 %.2e "
      "%.2e %.2e | 3xTF32 autotuned %.2e %.2e %.2e\n",
      ieee.y, ieee.dx, ieee.dw, tf32.y, tf32.dx, tf32.dw, x3.y, x3.dx, x3.dw, x3_tuned.y, x3_tuned.dx, x3_tuned.dw);
  for (const Errors& e : {x3, x3_tuned}) {
    CHECK(e.y < 1e-6);  // strict fp32 measures about 1e-7 here, one TF32 GEMM about 3e-4
    CHECK(e.dx < 1e-6);
    CHECK(e.dw < 1e-6);
    CHECK(e.y < 4 * ieee.y + 1e-7);
    CHECK(e.dw < 4 * ieee.dw + 1e-7);
  }
  CHECK(tf32.y > 1e-5);  // the split is what brings the accuracy back
  CHECK(tf32.dw > 1e-5);

  // What the mode refuses: the BGRADB epilogue (try_gemm answers false), device scalars, and a
  // shape larger than the scratch.
  LtGemmOptions o;
  o.compute = CUBLAS_COMPUTE_32F_PEDANTIC;
  o.tf32x3_scratch_bytes = tf32x3_scratch_bytes(N, K, M);  // the weight gradient's, smaller than forward's
  LtGemm lt(st.s, o);
  DevVec<float> x(hx), w(hw), y((size_t)M * N), dy(hdy), dw((size_t)N * K), db(N),
      scalars(std::vector<float>{-0.1f, 1.0f});
  CHECK_FALSE(linear_backward_weight_bias(lt, dy.get(), x.get(), dw.get(), db.get(), M, N, K));
  CHECK_THROWS_AS(linear_update_weight(lt, dy.get(), x.get(), dw.get(), scalars.get(), M, N, K), std::invalid_argument);
  CHECK_THROWS_WITH(linear_forward(lt, x.get(), w.get(), nullptr, nullptr, y.get(), M, N, K),
                    Catch::Contains("the 3xTF32 scratch holds"));
  linear_backward_weight(lt, dy.get(), x.get(), dw.get(), M, N, K, false);  // fits: dW = dY^T X
  CHECK(norm_rel_err(dw.download(), host_gemm(true, false, N, K, M, 1, hdy, N, hx, K, 0, nullptr, K, nullptr)) < 1e-6);

  // Every transpose pair, strided operands, alpha and beta, k not a multiple of 4 (each half of the
  // split padded to 4), C separate and C = D with a bias, with and without autotuning.
  struct Shape { int m, n, k; };
  for (const Shape s : {Shape{37, 29, 45}, Shape{7, 5, 3}, Shape{50, 100, 768}})
    for (const bool ta : {false, true})
      for (const bool tb : {false, true})
        for (const int tune : {0, 8}) {
          INFO("m=" << s.m << " n=" << s.n << " k=" << s.k << " trans_a=" << ta << " trans_b=" << tb << " autotune=" << tune);
          LtGemmOptions so;
          so.compute = CUBLAS_COMPUTE_32F_PEDANTIC;
          so.autotune_candidates = tune;
          so.tf32x3_scratch_bytes = tf32x3_scratch_bytes(s.m, s.n, s.k);
          LtGemm g(st.s, so);
          const int ar = ta ? s.k : s.m, ac = ta ? s.m : s.k, br = tb ? s.n : s.k, bc = tb ? s.k : s.n;
          const int lda = ac + 3, ldb = bc + 1, ldd = s.n + 2;
          const auto ha = normal_vec((size_t)ar * lda, 3, 21), hbm = normal_vec((size_t)br * ldb, 3, 22),
                     hc = normal_vec((size_t)s.m * ldd, 1, 23), hbias = normal_vec(s.n, 1, 24);
          DevVec<float> da(ha), db(hbm), dc(hc), dd(hc), dbias(hbias), dsep((size_t)s.m * ldd);
          auto rows = [&](const std::vector<float>& v) {  // [m, n] out of [m, ldd]
            std::vector<float> r((size_t)s.m * s.n);
            for (int i = 0; i < s.m; ++i)
              for (int j = 0; j < s.n; ++j) r[(size_t)i * s.n + j] = v[(size_t)i * ldd + j];
            return r;
          };
          const auto hc_rows = rows(hc);
          // D = 0.5 op(A) op(B) + 1.5 C, C separate; then D = 0.5 op(A) op(B) + 1.5 D + bias in place.
          g.gemm(ta, tb, s.m, s.n, s.k, 0.5f, da.get(), lda, db.get(), ldb, 1.5f, dc.get(), ldd, dsep.get(), ldd);
          CHECK(norm_rel_err(rows(dsep.download()),
                             host_gemm(ta, tb, s.m, s.n, s.k, 0.5, ha, lda, hbm, ldb, 1.5, &hc_rows, s.n, nullptr)) < 1e-6);
          g.gemm(ta, tb, s.m, s.n, s.k, 0.5f, da.get(), lda, db.get(), ldb, 1.5f, dd.get(), ldd, dd.get(), ldd, dbias.get());
          CHECK(norm_rel_err(rows(dd.download()),
                             host_gemm(ta, tb, s.m, s.n, s.k, 0.5, ha, lda, hbm, ldb, 1.5, &hc_rows, s.n, &hbias)) < 1e-6);
        }
}
