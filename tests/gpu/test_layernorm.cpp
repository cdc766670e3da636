// LayerNorm of cuda/kernels/layernorm.h (layernorm_forward, layernorm_backward with the dx column
// sums) in fp32 and with bf16 output / incoming gradient / dx copy, against host loops in double
// written here (torch semantics: biased variance). CPU twin: layernorm_row_fwd and
// layernorm_row_bwd of model/cpu_vit.cpp.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cuda/kernels/layernorm.h"
#include "tests/catch.h"
#include "tests/gpu/bf16_test_util.h"
#include "tests/gpu/gpu_test_util.h"

using namespace vitddp;
using namespace vitddp_test;
using bf16 = __nv_bfloat16;

namespace {

// Gathers an [m, n] matrix stored with leading dimension ld.
std::vector<float> gather(const std::vector<float>& v, int m, int n, int ld) {
  std::vector<float> out((size_t)m * n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) out[(size_t)i * n + j] = v[(size_t)i * ld + j];
  return out;
}

}  // namespace

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

TEST_CASE("layernorm: bf16 output, bf16 incoming gradient and bf16 dx copy", "[gpu][layernorm][bf16]") {
  REQUIRE_GPU();
  Stream st;
  struct Shape { int rows, D; };
  // 1024, 768: one warp per row; 102: the scalar kernel and the column_sum fallback of dx_colsum.
  for (const Shape sh : {Shape{13, 100}, Shape{600, 1024}, Shape{7, 1280}, Shape{37, 768}, Shape{5, 102}}) {
    const int R = sh.rows, D = sh.D;
    INFO("rows=" << R << " D=" << D);
    auto hx = normal_vec((size_t)R * D, 23, 0, 2.0);
    for (auto& v : hx) v += 0.5f;
    const auto hg = normal_vec(D, 23, 1, 0.3), hbeta = normal_vec(D, 23, 2),
               hdy = rounded(normal_vec((size_t)R * D, 23, 3)), hdx0 = normal_vec((size_t)R * D, 23, 4);
    std::vector<float> hgamma(D);
    for (int d = 0; d < D; ++d) hgamma[d] = 1.0f + hg[d];
    const double eps = 1e-6;
    std::vector<double> y((size_t)R * D), dx((size_t)R * D), dgam(D, 0), dbet(D, 0);
    for (int r = 0; r < R; ++r) {
      double s = 0, q = 0;
      for (int d = 0; d < D; ++d) s += hx[(size_t)r * D + d];
      const double mu = s / D;
      for (int d = 0; d < D; ++d) q += (hx[(size_t)r * D + d] - mu) * (hx[(size_t)r * D + d] - mu);
      const double rs = 1.0 / std::sqrt(q / D + eps);
      double a = 0, b = 0;
      for (int d = 0; d < D; ++d) {
        const double xh = (hx[(size_t)r * D + d] - mu) * rs, g = hdy[(size_t)r * D + d];
        y[(size_t)r * D + d] = xh * hgamma[d] + hbeta[d];
        a += hgamma[d] * g;
        b += hgamma[d] * g * xh;
        dgam[d] += g * xh;
        dbet[d] += g;
      }
      for (int d = 0; d < D; ++d) {
        const double xh = (hx[(size_t)r * D + d] - mu) * rs;
        dx[(size_t)r * D + d] = hdx0[(size_t)r * D + d] + rs * (hgamma[d] * hdy[(size_t)r * D + d] - a / D - xh * b / D);
      }
    }
    DevVec<float> x(hx), gamma(hgamma), beta(hbeta), m(R), rs(R), dxd(hdx0), dg(D), db(D), dsum(D),
        scratch(layernorm_backward_scratch_floats(R, D));
    DevVec<bf16> y16((size_t)R * D), dy(to_bf16(hdy)), dx16((size_t)R * D);
    layernorm_forward(x.get(), D, gamma.get(), beta.get(), y16.get(), D, m.get(), rs.get(), R, D, (float)eps, st.s);
    CHECK(norm_rel_err(to_float(y16.download()), y) < 4e-3);
    layernorm_backward(dy.get(), D, x.get(), D, m.get(), rs.get(), gamma.get(), dxd.get(), D, true,
                       dg.get(), db.get(), false, R, D, scratch.get(), st.s, dx16.get(), dsum.get());
    const auto got = dxd.download();
    CHECK(norm_rel_err(got, dx) < 1e-5);
    std::vector<double> dx_sums(D, 0.0);  // the column sums are of the fp32 dx
    for (int r = 0; r < R; ++r)
      for (int d = 0; d < D; ++d) dx_sums[d] += dx[(size_t)r * D + d];
    CHECK(norm_rel_err(dsum.download(), dx_sums) < 1e-5);
    CHECK(norm_rel_err(dg.download(), dgam) < 1e-5);
    CHECK(norm_rel_err(db.download(), dbet) < 1e-5);
    // The bf16 copy is exactly the rounded fp32 result.
    const auto copy = dx16.download();
    size_t mismatches = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      uint16_t c;
      std::memcpy(&c, &copy[i], 2);
      mismatches += c != bf16_bits(got[i]);
    }
    CHECK(mismatches == 0);
  }
}
