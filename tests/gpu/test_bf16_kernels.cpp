// Unit tests of the bf16 / TF32 paths of the GPU kernels (cuda/kernels/cast.h, the bf16 overloads of
// lt_gemm, layernorm, gelu, attention, patch_embed, reduce) against host loops in double on the
// same bf16-rounded inputs.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cuda/kernels/attention.h"
#include "cuda/kernels/cast.h"
#include "cuda/kernels/gelu.h"
#include "cuda/kernels/layernorm.h"
#include "cuda/kernels/lt_gemm.h"
#include "cuda/kernels/patch_embed.h"
#include "model/precision.h"
#include "cuda/kernels/reduce.h"
#include "tests/catch.h"
#include "tests/gpu/attention_reference.h"
#include "tests/gpu/gemm_reference.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/patch_reference.h"

using namespace vitddp;
using namespace vitddp_test;
using bf16 = __nv_bfloat16;

namespace {

/// Host round-to-nearest-even of fp32 to bf16 (bit arithmetic, independent of the CUDA headers);
/// NaN is kept quiet.
uint16_t bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return (uint16_t)((u >> 16) | 0x40);
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)((u + rounding) >> 16);
}

float bf16_value(uint16_t b) {
  const uint32_t u = (uint32_t)b << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float round_bf16(float f) { return bf16_value(bf16_bits(f)); }

std::vector<bf16> to_bf16(const std::vector<float>& v) {
  std::vector<bf16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t b = bf16_bits(v[i]);
    std::memcpy(&out[i], &b, 2);
  }
  return out;
}

std::vector<float> to_float(const std::vector<bf16>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    uint16_t b;
    std::memcpy(&b, &v[i], 2);
    out[i] = bf16_value(b);
  }
  return out;
}

/// The values of v after rounding each to bf16 (the inputs the GPU sees).
std::vector<float> rounded(const std::vector<float>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = round_bf16(v[i]);
  return out;
}

}  // namespace

TEST_CASE("precision: names parse and print", "[gpu][precision]") {
  CHECK(parse_precision("fp32") == Precision::fp32);
  CHECK(parse_precision("tf32") == Precision::tf32);
  CHECK(parse_precision("bf16") == Precision::bf16);
  CHECK(std::string(precision_name(Precision::bf16)) == "bf16");
  CHECK(precision_names() == std::vector<std::string>{"fp32", "tf32", "bf16"});
  CHECK_THROWS_AS(parse_precision("fp16"), std::invalid_argument);
  CHECK_THROWS_AS(parse_precision("BF16"), std::invalid_argument);
}

TEST_CASE("cast: convert_to_bf16 rounds to nearest even like the host", "[gpu][cast]") {
  REQUIRE_GPU();
  Stream st;
  for (size_t n : {size_t(1), size_t(7), size_t(1000003)}) {
    INFO("n=" << n);
    std::vector<float> h = normal_vec(n, 11, 0, 3.0);
    if (n > 8) {  // ties, tiny, huge and special values
      h[0] = 1.00390625f;          // exactly half-way between two bf16: rounds to even (1.0)
      h[1] = 1.01171875f;          // half-way, rounds up to even
      h[2] = 3.4e38f;              // above the largest bf16 (3.39e38): rounds to +Inf
      h[3] = -1e-40f;              // denormal
      h[4] = INFINITY;
      h[5] = 0.0f;
    }
    DevVec<float> x(h);
    DevVec<bf16> y(n);
    convert_to_bf16(x.get(), y.get(), n, st.s);
    const auto got = y.download();
    size_t mismatches = 0;
    for (size_t i = 0; i < n; ++i) {
      uint16_t g;
      std::memcpy(&g, &got[i], 2);
      mismatches += g != bf16_bits(h[i]);
    }
    CHECK(mismatches == 0);
    // Unaligned start (scalar path).
    if (n > 8) {
      convert_to_bf16(x.get() + 1, y.get() + 3, n - 8, st.s);
      const auto got2 = y.download();
      size_t bad = 0;
      for (size_t i = 0; i < n - 8; ++i) {
        uint16_t g;
        std::memcpy(&g, &got2[i + 3], 2);
        bad += g != bf16_bits(h[i + 1]);
      }
      CHECK(bad == 0);
    }
  }
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
  tf.set_timing(false);
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

TEST_CASE("gelu: bf16 forward and backward match host loops", "[gpu][gelu][bf16]") {
  REQUIRE_GPU();
  Stream st;
  for (size_t n : {size_t(100003), size_t(64)}) {
    const auto hu = rounded(normal_vec(n, 24, 0, 3.0)), hdy = rounded(normal_vec(n, 24, 1));
    std::vector<double> y(n), du(n);
    for (size_t i = 0; i < n; ++i) {
      const double u = hu[i];
      y[i] = 0.5 * u * (1.0 + std::erf(u / std::sqrt(2.0)));
      du[i] = hdy[i] * (0.5 * (1.0 + std::erf(u / std::sqrt(2.0))) + u * std::exp(-0.5 * u * u) / std::sqrt(2 * M_PI));
    }
    DevVec<bf16> u(to_bf16(hu)), yd(n), dy(to_bf16(hdy));
    gelu_forward(u.get(), yd.get(), n, st.s);
    CHECK(norm_rel_err(to_float(yd.download()), y) < 4e-3);
    gelu_backward(dy.get(), u.get(), dy.get(), n, st.s);  // in place
    CHECK(norm_rel_err(to_float(dy.download()), du) < 4e-3);
    // Unaligned (scalar) path.
    gelu_forward(u.get() + 1, yd.get() + 1, n - 1, st.s);
    std::vector<double> y1(y.begin() + 1, y.end());
    const auto all = to_float(yd.download());
    CHECK(norm_rel_err(std::vector<float>(all.begin() + 1, all.end()), y1) < 4e-3);
  }
}

TEST_CASE("gelu: bf16 backward fused with the bias gradient sums the stored bf16 values", "[gpu][gelu][bf16]") {
  REQUIRE_GPU();
  Stream st;
  struct Shape { int rows, cols; };
  for (const Shape sh : {Shape{37, 4096}, Shape{5, 20}}) {  // fused kernel; gelu_backward + column_sum
    const int R = sh.rows, C = sh.cols;
    INFO("rows=" << R << " cols=" << C);
    const size_t n = (size_t)R * C;
    const auto hu = rounded(normal_vec(n, 25, 0, 3.0)), hdy = rounded(normal_vec(n, 25, 1));
    std::vector<double> du(n);
    for (size_t i = 0; i < n; ++i) {
      const double u = hu[i];
      du[i] = hdy[i] * (0.5 * (1.0 + std::erf(u / std::sqrt(2.0))) + u * std::exp(-0.5 * u * u) / std::sqrt(2 * M_PI));
    }
    DevVec<bf16> u(to_bf16(hu)), dy(to_bf16(hdy));
    DevVec<float> dbd(C), scratch(gelu_backward_bias_scratch_floats(R, C));
    gelu_backward_bias(dy.get(), u.get(), dy.get(), R, C, dbd.get(), false, scratch.get(), st.s);  // in place
    const auto got = to_float(dy.download());
    CHECK(norm_rel_err(got, du) < 4e-3);
    // db is the column sum of the bf16 values stored in du, up to fp32 summation.
    std::vector<double> stored(C, 0.0);
    for (size_t i = 0; i < n; ++i) stored[i % C] += got[i];
    CHECK(norm_rel_err(dbd.download(), stored) < 1e-5);
  }
}

TEST_CASE("attention: bf16 activations match host loops", "[gpu][attention][bf16]") {
  REQUIRE_GPU();
  Stream st;
  struct Shape { int B, H, T, dh; };
  // head_dim 64 with T <= 64 runs the tensor-core kernels (cuda/kernels/attention_mma.h): full, partial and
  // single-row tiles; head_dim 32 and T = 70 run the fp32 small-shape and general kernels.
  for (const Shape sh : {Shape{2, 3, 50, 64}, Shape{1, 2, 64, 64}, Shape{3, 2, 1, 64}, Shape{2, 2, 17, 64},
                         Shape{1, 1, 33, 64}, Shape{2, 2, 50, 32}, Shape{2, 1, 70, 80}}) {
    const int B = sh.B, H = sh.H, T = sh.T, dh = sh.dh, D = H * dh;
    INFO("B=" << B << " H=" << H << " T=" << T << " dh=" << dh);
    const auto hqkv = rounded(normal_vec((size_t)B * T * 3 * D, 25, 0)),
               hdo = rounded(normal_vec((size_t)B * T * D, 25, 1));
    const AttentionRef ref = attention_reference(hqkv, hdo, B, T, H, dh);
    const std::vector<double>&P = ref.probs, &O = ref.out, &dQKV = ref.dqkv;
    DevVec<bf16> qkv(to_bf16(hqkv)), out(O.size()), dout(to_bf16(hdo)), dqkv(dQKV.size());
    DevVec<float> probs(P.size()), scratch(attention_backward_scratch_floats(B, T, H));
    attention_forward(qkv.get(), probs.get(), out.get(), B, T, H, dh, st.s);
    CHECK(norm_rel_err(probs.download(), P) < 1e-5);  // fp32 softmax of exact bf16 inputs
    CHECK(norm_rel_err(to_float(out.download()), O) < 4e-3);
    attention_backward(qkv.get(), probs.get(), dout.get(), dqkv.get(), scratch.get(), B, T, H, dh, st.s);
    CHECK(norm_rel_err(to_float(dqkv.download()), dQKV) < 4e-3);
  }
}

TEST_CASE("patch_embed and reduce: bf16 im2col, bf16 patch-embedding gradient, bf16 column sums",
          "[gpu][patch_embed][reduce][bf16]") {
  REQUIRE_GPU();
  Stream st;
  const PatchGeometry g = small_patch_geometry();
  const int D = g.hidden, T = g.seq_len();
  const auto himg = normal_vec((size_t)g.batch * g.channels * g.image * g.image, 26, 0),
             hdh = normal_vec((size_t)g.batch * T * D, 26, 1);
  const std::vector<float> patches = rounded(host_im2col(himg, g));
  const TokenGrads ref = host_assemble_tokens_backward(hdh, g);
  const std::vector<float> demb = rounded(ref.demb);
  const std::vector<double>&dcls = ref.dcls, &dpos = ref.dpos;
  DevVec<float> img(himg), dh(hdh), dcl(D), dps((size_t)T * D);
  DevVec<bf16> pd(patches.size()), dembd(demb.size());
  patch_im2col(img.get(), pd.get(), g, st.s);
  CHECK(to_float(pd.download()) == patches);
  assemble_tokens_backward(dh.get(), dembd.get(), dcl.get(), dps.get(), false, g, st.s);
  CHECK(to_float(dembd.download()) == demb);
  CHECK(norm_rel_err(dcl.download(), dcls) < 1e-6);
  CHECK(norm_rel_err(dps.download(), dpos) < 1e-6);

  // Column sums of bf16 rows, fp32 accumulation (and accumulate=true adds).
  const int R = 1600, Cc = 1024;
  const auto hx = rounded(normal_vec((size_t)R * Cc, 26, 2)), ho = normal_vec(Cc, 26, 3);
  std::vector<double> s(Cc, 0), s2(Cc);
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < Cc; ++c) s[c] += hx[(size_t)r * Cc + c];
  for (int c = 0; c < Cc; ++c) s2[c] = s[c] + ho[c];
  DevVec<bf16> x(to_bf16(hx));
  DevVec<float> out(ho), scratch(column_sum_scratch_floats(R, Cc));
  column_sum(x.get(), R, Cc, Cc, out.get(), true, scratch.get(), st.s);
  CHECK(norm_rel_err(out.download(), s2) < 1e-6);
  column_sum(x.get(), R, Cc, Cc, out.get(), false, scratch.get(), st.s);
  CHECK(norm_rel_err(out.download(), s) < 1e-6);
}
