// Unit tests of the GPU kernel families (cuda/kernels/*.h) against plain host loops in double.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/kernels/attention.h"
#include "cuda/kernels/gelu.h"
#include "cuda/kernels/layernorm.h"
#include "cuda/kernels/loss.h"
#include "cuda/kernels/lt_gemm.h"
#include "cuda/kernels/patch_embed.h"
#include "cuda/kernels/reduce.h"
#include "tests/catch.h"
#include "tests/gpu/attention_reference.h"
#include "tests/gpu/gemm_reference.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/patch_reference.h"

using namespace vitddp;
using namespace vitddp_test;

namespace {

// Gathers an [m, n] matrix stored with leading dimension ld.
std::vector<float> gather(const std::vector<float>& v, int m, int n, int ld) {
  std::vector<float> out((size_t)m * n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) out[(size_t)i * n + j] = v[(size_t)i * ld + j];
  return out;
}

/// Norm-relative errors of the fp32 attention kernels (`precision` fp32, or tf32: on TF32 tensor
/// cores where the shape allows) against attention_reference in double, on normal inputs (stream `s`).
struct AttentionErrors {
  double probs, out, dqkv;
};
AttentionErrors attention_errors(cudaStream_t s, int B, int H, int T, int dh, Precision precision) {
  const int D = H * dh;
  const auto hqkv = normal_vec((size_t)B * T * 3 * D, 4, 0), hdo = normal_vec((size_t)B * T * D, 4, 1);
  const AttentionRef ref = attention_reference(hqkv, hdo, B, T, H, dh);
  DevVec<float> qkv(hqkv), probs(ref.probs.size()), out(ref.out.size()), dout(hdo), dqkv(ref.dqkv.size()),
      scratch(attention_backward_scratch_floats(B, T, H));
  attention_forward(qkv.get(), probs.get(), out.get(), B, T, H, dh, s, precision);
  attention_backward(qkv.get(), probs.get(), dout.get(), dqkv.get(), scratch.get(), B, T, H, dh, s, precision);
  return {norm_rel_err(probs.download(), ref.probs), norm_rel_err(out.download(), ref.out),
          norm_rel_err(dqkv.download(), ref.dqkv)};
}

}  // namespace

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

TEST_CASE("layernorm: forward and backward match host loops", "[gpu][layernorm]") {
  REQUIRE_GPU();
  Stream st;
  struct Shape { int rows, D, ldx; };
  // Kernels: 100/107 and 1280/1290 scalar; 8 and 1152 (D = 128 x 9) one block per row, 16-byte
  // accesses; 1024, 768 and 256 (ldx 260) one warp per row (layernorm_warp.cuh), 37 and 9 rows
  // leaving a block's warps partly idle; 1200 x 256 gives each warp two rows and 700 x 8 each
  // block-per-row block two rows (their partial sums carried across rows).
  for (const Shape sh : {Shape{13, 100, 107}, Shape{600, 1024, 1024}, Shape{5, 8, 8}, Shape{7, 1280, 1290},
                         Shape{37, 768, 768}, Shape{9, 256, 260}, Shape{3, 1152, 1152}, Shape{1200, 256, 256},
                         Shape{700, 8, 8}}) {
    const int R = sh.rows, D = sh.D, ldx = sh.ldx;
    INFO("rows=" << R << " D=" << D << " ldx=" << ldx);
    auto hx = normal_vec((size_t)R * ldx, 3, 0, 2.0);
    for (size_t i = 0; i < hx.size(); ++i) hx[i] += 0.5f;  // non-zero mean
    const auto hg = normal_vec(D, 3, 1, 0.3), hbeta = normal_vec(D, 3, 2),
               hdy = normal_vec((size_t)R * ldx, 3, 3), hdx0 = normal_vec((size_t)R * ldx, 3, 4),
               hdg0 = normal_vec(D, 3, 5), hdb0 = normal_vec(D, 3, 6);
    std::vector<float> hgamma(D);
    for (int d = 0; d < D; ++d) hgamma[d] = 1.0f + hg[d];
    const double eps = 1e-6;

    // Host reference.
    std::vector<double> y((size_t)R * D), dx((size_t)R * D), mean(R), rstd(R), dgam(D, 0), dbet(D, 0);
    for (int r = 0; r < R; ++r) {
      double s = 0;
      for (int d = 0; d < D; ++d) s += hx[(size_t)r * ldx + d];
      const double mu = s / D;
      double q = 0;
      for (int d = 0; d < D; ++d) q += (hx[(size_t)r * ldx + d] - mu) * (hx[(size_t)r * ldx + d] - mu);
      const double rs = 1.0 / std::sqrt(q / D + eps);
      mean[r] = mu;
      rstd[r] = rs;
      double a = 0, b = 0;
      for (int d = 0; d < D; ++d) {
        const double xh = (hx[(size_t)r * ldx + d] - mu) * rs;
        y[(size_t)r * D + d] = xh * hgamma[d] + hbeta[d];
        const double gy = hgamma[d] * hdy[(size_t)r * ldx + d];
        a += gy;
        b += gy * xh;
        dgam[d] += hdy[(size_t)r * ldx + d] * xh;
        dbet[d] += hdy[(size_t)r * ldx + d];
      }
      for (int d = 0; d < D; ++d) {
        const double xh = (hx[(size_t)r * ldx + d] - mu) * rs;
        const double gy = hgamma[d] * hdy[(size_t)r * ldx + d];
        dx[(size_t)r * D + d] = rs * (gy - a / D - xh * b / D);
      }
    }

    DevVec<float> x(hx), gamma(hgamma), beta(hbeta), dy(hdy), yd((size_t)R * D), m(R), rs(R),
        dxd(hdx0), dg(hdg0), db(hdb0), scratch(layernorm_backward_scratch_floats(R, D)),
        dsum(hdb0);  // dx_colsum, accumulated onto hdb0 first
    // Column sums of the final dx (after the add): ldx 107 and 1290 take the scalar kernel and
    // column_sum, the others the vector kernel's partials.
    auto colsum = [&](const std::vector<float>& dxv, const std::vector<float>& base) {
      std::vector<double> c(D, 0.0);
      for (int d = 0; d < D; ++d) c[d] = base.empty() ? 0.0 : base[d];
      for (int r = 0; r < R; ++r)
        for (int d = 0; d < D; ++d) c[d] += dxv[(size_t)r * ldx + d];
      return c;
    };
    layernorm_forward(x.get(), ldx, gamma.get(), beta.get(), yd.get(), D, m.get(), rs.get(), R, D,
                      (float)eps, st.s);
    CHECK(norm_rel_err(yd.download(), y) < 1e-6);
    CHECK(norm_rel_err(m.download(), mean) < 1e-6);
    CHECK(norm_rel_err(rs.download(), rstd) < 1e-6);

    // add_dx = true, accumulate = true: dx = dx0 + LNbwd, dgamma = dg0 + ..., dbeta = db0 + ...
    layernorm_backward(dy.get(), ldx, x.get(), ldx, m.get(), rs.get(), gamma.get(), dxd.get(), ldx,
                       true, dg.get(), db.get(), true, R, D, scratch.get(), st.s, nullptr, dsum.get());
    {
      const auto got = dxd.download();
      CHECK(norm_rel_err(dsum.download(), colsum(got, hdb0)) < 1e-6);
      std::vector<double> ref((size_t)R * D), gotc((size_t)R * D);
      for (int r = 0; r < R; ++r)
        for (int d = 0; d < D; ++d) {
          ref[(size_t)r * D + d] = hdx0[(size_t)r * ldx + d] + dx[(size_t)r * D + d];
          gotc[(size_t)r * D + d] = got[(size_t)r * ldx + d];
        }
      CHECK(norm_rel_err(gotc, ref) < 1e-6);
      // Padding columns of the strided dx are untouched.
      for (int r = 0; r < R; ++r)
        for (int d = D; d < ldx; ++d) CHECK(got[(size_t)r * ldx + d] == hdx0[(size_t)r * ldx + d]);
      std::vector<double> rg(D), rb(D);
      for (int d = 0; d < D; ++d) {
        rg[d] = hdg0[d] + dgam[d];
        rb[d] = hdb0[d] + dbet[d];
      }
      CHECK(norm_rel_err(dg.download(), rg) < 1e-6);
      CHECK(norm_rel_err(db.download(), rb) < 1e-6);
    }
    // add_dx = false, accumulate = false.
    layernorm_backward(dy.get(), ldx, x.get(), ldx, m.get(), rs.get(), gamma.get(), dxd.get(), ldx,
                       false, dg.get(), db.get(), false, R, D, scratch.get(), st.s, nullptr, dsum.get());
    CHECK(norm_rel_err(gather(dxd.download(), R, D, ldx), dx) < 1e-5);
    std::vector<double> dx_sums(D, 0.0);
    for (int r = 0; r < R; ++r)
      for (int d = 0; d < D; ++d) dx_sums[d] += dx[(size_t)r * D + d];
    CHECK(norm_rel_err(dsum.download(), dx_sums) < 1e-5);
    CHECK(norm_rel_err(dg.download(), dgam) < 1e-6);
    CHECK(norm_rel_err(db.download(), dbet) < 1e-6);
  }
}

TEST_CASE("attention: forward and backward match host loops", "[gpu][attention]") {
  REQUIRE_GPU();
  Stream st;
  struct Shape { int B, H, T, dh; };
  for (const Shape sh : {Shape{2, 3, 50, 64}, Shape{1, 2, 7, 16}, Shape{2, 1, 70, 80}, Shape{1, 2, 197, 64}}) {
    INFO("B=" << sh.B << " H=" << sh.H << " T=" << sh.T << " dh=" << sh.dh);
    const AttentionErrors e = attention_errors(st.s, sh.B, sh.H, sh.T, sh.dh, Precision::fp32);
    CHECK(e.probs < 1e-5);
    CHECK(e.out < 1e-5);
    CHECK(e.dqkv < 1e-5);
  }
  DevVec<float> dummy(16);
  CHECK_THROWS_AS(attention_forward(dummy.get(), dummy.get(), dummy.get(), 1, 513, 1, 64, st.s, Precision::tf32),
                  std::invalid_argument);
  CHECK_THROWS_AS(attention_forward(dummy.get(), dummy.get(), dummy.get(), 1, 50, 1, 64, st.s, Precision::bf16),
                  std::invalid_argument);  // fp32 buffers: fp32 or tf32 only
  CHECK_THROWS_AS(attention_forward(dummy.get(), dummy.get(), dummy.get(), 1, 513, 1, 64, st.s),
                  std::invalid_argument);
  CHECK_THROWS_AS(attention_forward(dummy.get(), dummy.get(), dummy.get(), 1, 50, 1, 129, st.s),
                  std::invalid_argument);
  CHECK_THROWS_AS(attention_forward(dummy.get(), dummy.get(), dummy.get(), 65536, 50, 1, 64, st.s),
                  std::invalid_argument);  // grid limit: refused before any launch
  // Within both bounds, but the larger kernels' shared memory (532 KiB at T 512, head_dim 128)
  // exceeds any GPU's per-block limit (227 KiB on an H200): refused by name, in both directions.
  std::string msg;
  try {
    attention_forward(dummy.get(), dummy.get(), dummy.get(), 1, 512, 1, 128, st.s);
  } catch (const std::invalid_argument& e) {
    msg = e.what();
  }
  INFO(msg);
  CHECK(msg.find("T=512") != std::string::npos);
  CHECK(msg.find("shared memory") != std::string::npos);
  CHECK_THROWS_AS(attention_backward(dummy.get(), dummy.get(), dummy.get(), dummy.get(), dummy.get(), 1, 512, 1, 128,
                                     st.s),
                  std::invalid_argument);
  CUDA_CHECK(cudaStreamSynchronize(st.s));  // no launch error is left behind
}

TEST_CASE("attention: tf32 tensor cores (--precision tf32) match host loops within tf32 rounding",
          "[gpu][attention][tf32]") {
  REQUIRE_GPU();
  Stream st;
  struct Shape { int B, H, T, dh; };
  // head_dim 64 with T <= 64 runs the tensor-core kernels (cuda/kernels/attention_mma.h): the inputs are
  // rounded to tf32 (10-bit mantissa, relative 2^-11), so the error is visible but small. The
  // other shapes keep fp32 arithmetic even with tf32 on.
  for (const Shape sh : {Shape{2, 3, 50, 64}, Shape{1, 2, 64, 64}, Shape{3, 2, 1, 64}, Shape{2, 2, 17, 64},
                         Shape{1, 2, 7, 16}, Shape{2, 1, 70, 80}}) {
    const bool tensor_cores = sh.T <= 64 && sh.dh == 64;
    INFO("B=" << sh.B << " H=" << sh.H << " T=" << sh.T << " dh=" << sh.dh);
    const AttentionErrors e = attention_errors(st.s, sh.B, sh.H, sh.T, sh.dh, Precision::tf32);
    std::printf("attention tf32 B=%d H=%d T=%d dh=%d: norm-relative errors probs %.2e out %.2e dqkv %.2e\n", sh.B, sh.H,
                sh.T, sh.dh, e.probs, e.out, e.dqkv);
    const double tol = tensor_cores ? 3e-3 : 1e-5;
    CHECK(e.probs < tol);
    CHECK(e.out < tol);
    CHECK(e.dqkv < tol);
    if (tensor_cores) CHECK(e.out > 1e-6);  // tf32 rounding is there: the tensor-core path ran (T = 1: probs are 1)
  }
}

TEST_CASE("gelu: exact erf GELU forward and backward match host loops", "[gpu][gelu]") {
  REQUIRE_GPU();
  Stream st;
  const size_t n = 100003;
  const auto hu = normal_vec(n, 5, 0, 3.0), hdy = normal_vec(n, 5, 1);
  std::vector<double> y(n), du(n);
  for (size_t i = 0; i < n; ++i) {
    const double u = hu[i];
    y[i] = 0.5 * u * (1.0 + std::erf(u / std::sqrt(2.0)));
    du[i] = hdy[i] * (0.5 * (1.0 + std::erf(u / std::sqrt(2.0))) + u * std::exp(-0.5 * u * u) / std::sqrt(2 * M_PI));
  }
  DevVec<float> u(hu), yd(n), dy(hdy);
  gelu_forward(u.get(), yd.get(), n, st.s);
  CHECK(norm_rel_err(yd.download(), y) < 1e-6);
  gelu_backward(dy.get(), u.get(), dy.get(), n, st.s);  // in place
  CHECK(norm_rel_err(dy.download(), du) < 1e-6);
}

TEST_CASE("gelu: backward fused with the bias gradient matches host loops", "[gpu][gelu][reduce]") {
  REQUIRE_GPU();
  Stream st;
  struct Shape { int rows, cols; };
  // 37 x 4096: the fused kernel (rows not a multiple of its 16-row chunks or 4-row batches);
  // 5 x 20: cols not a multiple of 8, gelu_backward + column_sum.
  for (const Shape sh : {Shape{37, 4096}, Shape{5, 20}, Shape{1, 1032}}) {
    const int R = sh.rows, C = sh.cols;
    INFO("rows=" << R << " cols=" << C);
    const size_t n = (size_t)R * C;
    const auto hu = normal_vec(n, 9, 0, 3.0), hdy = normal_vec(n, 9, 1), hdb0 = normal_vec(C, 9, 2);
    std::vector<double> du(n), db(C, 0.0), db_acc(hdb0.begin(), hdb0.end());
    for (size_t i = 0; i < n; ++i) {
      const double u = hu[i];
      du[i] = hdy[i] * (0.5 * (1.0 + std::erf(u / std::sqrt(2.0))) + u * std::exp(-0.5 * u * u) / std::sqrt(2 * M_PI));
      db[i % C] += du[i];
      db_acc[i % C] += du[i];
    }
    DevVec<float> u(hu), dy(hdy), out(n), dbd(hdb0), scratch(gelu_backward_bias_scratch_floats(R, C));
    gelu_backward_bias(dy.get(), u.get(), out.get(), R, C, dbd.get(), true, scratch.get(), st.s);
    CHECK(norm_rel_err(out.download(), du) < 1e-6);
    CHECK(norm_rel_err(dbd.download(), db_acc) < 1e-6);
    gelu_backward_bias(dy.get(), u.get(), dy.get(), R, C, dbd.get(), false, scratch.get(), st.s);  // in place
    CHECK(norm_rel_err(dy.download(), du) < 1e-6);
    CHECK(norm_rel_err(dbd.download(), db) < 1e-6);
  }
}

TEST_CASE("loss: softmax cross-entropy and its gradient match host loops", "[gpu][loss]") {
  REQUIRE_GPU();
  Stream st;
  const int B = 5, K = 1000;
  const auto hz = normal_vec((size_t)B * K, 6, 0, 3.0);
  std::vector<int32_t> hl(B);
  for (int b = 0; b < B; ++b) hl[b] = (int32_t)(vitddp::rand_bits(6, 1, b) % K);
  double loss = 0;
  std::vector<double> dz((size_t)B * K);
  for (int b = 0; b < B; ++b) {
    double mx = -1e300, s = 0;
    for (int k = 0; k < K; ++k) mx = std::max(mx, (double)hz[(size_t)b * K + k]);
    for (int k = 0; k < K; ++k) s += std::exp(hz[(size_t)b * K + k] - mx);
    loss += (std::log(s) + mx - hz[(size_t)b * K + hl[b]]) / B;
    for (int k = 0; k < K; ++k)
      dz[(size_t)b * K + k] = (std::exp(hz[(size_t)b * K + k] - mx) / s - (k == hl[b] ? 1 : 0)) / B;
  }
  DevVec<float> z(hz), dzd((size_t)B * K), l(1), scratch(softmax_xent_scratch_floats(B));
  DevVec<int32_t> lab(hl);
  softmax_xent(z.get(), lab.get(), B, K, l.get(), dzd.get(), scratch.get(), st.s);
  CHECK(std::fabs(l.download()[0] - loss) <= 1e-6 * std::fabs(loss));
  CHECK(norm_rel_err(dzd.download(), dz) < 1e-6);
  // An out-of-range label gives a NaN loss.
  hl[2] = K;
  lab.upload(hl);
  softmax_xent(z.get(), lab.get(), B, K, l.get(), dzd.get(), scratch.get(), st.s);
  CHECK(std::isnan(l.download()[0]));
}

TEST_CASE("reduce: column sums match host loops", "[gpu][reduce]") {
  REQUIRE_GPU();
  Stream st;
  for (const auto& [R, C, ld] : std::vector<std::tuple<int, int, int>>{{1600, 1024, 1024}, {4, 1000, 1000}, {300, 37, 40}}) {
    INFO("rows=" << R << " cols=" << C << " ld=" << ld);
    const auto hx = normal_vec((size_t)R * ld, 7, 0), ho = normal_vec(C, 7, 1);
    std::vector<double> s(C, 0), s2(C);
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) s[c] += hx[(size_t)r * ld + c];
    for (int c = 0; c < C; ++c) s2[c] = s[c] + ho[c];
    DevVec<float> x(hx), out(ho), scratch(column_sum_scratch_floats(R, C));
    column_sum(x.get(), R, C, ld, out.get(), true, scratch.get(), st.s);
    CHECK(norm_rel_err(out.download(), s2) < 1e-6);
    column_sum(x.get(), R, C, ld, out.get(), false, scratch.get(), st.s);
    const auto first = out.download();
    CHECK(norm_rel_err(first, s) < 1e-6);
    column_sum(x.get(), R, C, ld, out.get(), false, scratch.get(), st.s);
    CHECK(out.download() == first);  // deterministic
  }
}

TEST_CASE("patch_embed: im2col, token assembly and its backward match host loops",
          "[gpu][patch_embed]") {
  REQUIRE_GPU();
  Stream st;
  const PatchGeometry g = small_patch_geometry();
  const int B = g.batch, D = g.hidden, Np = g.num_patches(), T = g.seq_len();
  const auto himg = normal_vec((size_t)B * g.channels * g.image * g.image, 8, 0),
             hemb = normal_vec((size_t)B * Np * D, 8, 1), hcls = normal_vec(D, 8, 2),
             hpos = normal_vec((size_t)T * D, 8, 3), hdh = normal_vec((size_t)B * T * D, 8, 4),
             hdcls0 = normal_vec(D, 8, 5), hdpos0 = normal_vec((size_t)T * D, 8, 6);
  const std::vector<float> patches = host_im2col(himg, g);
  std::vector<float> h((size_t)B * T * D);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int d = 0; d < D; ++d)
        h[((size_t)b * T + t) * D + d] =
            (t == 0 ? hcls[d] : hemb[((size_t)b * Np + t - 1) * D + d]) + hpos[(size_t)t * D + d];
  const TokenGrads ref = host_assemble_tokens_backward(hdh, g);
  const std::vector<float>& demb = ref.demb;
  const std::vector<double>&dcls = ref.dcls, &dpos = ref.dpos;
  DevVec<float> img(himg), pd(patches.size()), emb(hemb), cls(hcls), pos(hpos), hd(h.size()),
      dh(hdh), dembd(demb.size()), dclsd(hdcls0), dposd(hdpos0);
  patch_im2col(img.get(), pd.get(), g, st.s);
  CHECK(pd.download() == patches);
  assemble_tokens(emb.get(), cls.get(), pos.get(), hd.get(), g, st.s);
  CHECK(hd.download() == h);
  assemble_tokens_backward(dh.get(), dembd.get(), dclsd.get(), dposd.get(), true, g, st.s);
  CHECK(dembd.download() == demb);
  std::vector<double> dcls_acc(D), dpos_acc(dpos.size());
  for (int d = 0; d < D; ++d) dcls_acc[d] = dcls[d] + hdcls0[d];
  for (size_t i = 0; i < dpos.size(); ++i) dpos_acc[i] = dpos[i] + hdpos0[i];
  CHECK(norm_rel_err(dclsd.download(), dcls_acc) < 1e-6);
  CHECK(norm_rel_err(dposd.download(), dpos_acc) < 1e-6);
  assemble_tokens_backward(dh.get(), dembd.get(), dclsd.get(), dposd.get(), false, g, st.s);
  CHECK(norm_rel_err(dclsd.download(), dcls) < 1e-6);
  CHECK(norm_rel_err(dposd.download(), dpos) < 1e-6);
}
