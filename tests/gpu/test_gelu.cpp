// Exact (erf) GELU of cuda/kernels/gelu.h (gelu_forward, gelu_backward, gelu_backward_bias with
// the fused bias gradient) in fp32 and bf16, against host loops in double written here
// (torch.nn.GELU()). CPU twin: gelu and gelu_grad of model/cpu_vit.cpp.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "cuda/kernels/gelu.h"
#include "tests/catch.h"
#include "tests/gpu/bf16_test_util.h"
#include "tests/gpu/gpu_test_util.h"

using namespace vitddp;
using namespace vitddp_test;
using bf16 = __nv_bfloat16;

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
    DevVec<float> u(hu), dy(hdy), out(n), dbd(hdb0), scratch(gelu_backward_bias_scratch_floats(R, C, false));
    gelu_backward_bias(dy.get(), u.get(), out.get(), R, C, dbd.get(), true, scratch.get(), st.s);
    CHECK(norm_rel_err(out.download(), du) < 1e-6);
    CHECK(norm_rel_err(dbd.download(), db_acc) < 1e-6);
    gelu_backward_bias(dy.get(), u.get(), dy.get(), R, C, dbd.get(), false, scratch.get(), st.s);  // in place
    CHECK(norm_rel_err(dy.download(), du) < 1e-6);
    CHECK(norm_rel_err(dbd.download(), db) < 1e-6);
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
    DevVec<float> dbd(C), scratch(gelu_backward_bias_scratch_floats(R, C, true));
    gelu_backward_bias(dy.get(), u.get(), dy.get(), R, C, dbd.get(), false, scratch.get(), st.s);  // in place
    const auto got = to_float(dy.download());
    CHECK(norm_rel_err(got, du) < 4e-3);
    // db is the column sum of the bf16 values stored in du, up to fp32 summation.
    std::vector<double> stored(C, 0.0);
    for (size_t i = 0; i < n; ++i) stored[i % C] += got[i];
    CHECK(norm_rel_err(dbd.download(), stored) < 1e-5);
  }
}

TEST_CASE(
    "gelu: the bf16 backward's derivative (erf by Abramowitz and Stegun 7.1.26) rounds like the exact one "
    "on every bf16 input with |u| <= 16",
    "[gpu][gelu][bf16]") {
  REQUIRE_GPU();
  Stream st;
  std::vector<float> hu;
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = bf16_value((uint16_t)b);
    if (std::isfinite(f) && std::fabs(f) <= 16.0f) hu.push_back(f);
  }
  const size_t n = hu.size();
  const int C = 512, R = (int)(n / C);  // the fused kernel on the first R x C inputs
  std::vector<double> want(n);
  for (size_t i = 0; i < n; ++i) {
    const double u = hu[i];
    // Phi(u) as erfc(-u / sqrt(2)) / 2: no cancellation in the left tail, where 1 + erf loses it.
    want[i] =
        round_bf16((float)(0.5 * std::erfc(-u / std::sqrt(2.0)) + u * std::exp(-0.5 * u * u) / std::sqrt(2 * M_PI)));
  }
  DevVec<bf16> u(to_bf16(hu)), ones(to_bf16(std::vector<float>(n, 1.0f))), du(n), dub((size_t)R * C);
  DevVec<float> db(C), scratch(gelu_backward_bias_scratch_floats(R, C, true));
  gelu_backward(ones.get(), u.get(), du.get(), n, st.s);  // du = gelu'(u), rounded to bf16
  gelu_backward_bias(ones.get(), u.get(), dub.get(), R, C, db.get(), false, scratch.get(), st.s);
  const std::vector<float> got = to_float(du.download()), gotb = to_float(dub.download());
  size_t differ = 0, far = 0, kernels_differ = 0;
  for (size_t i = 0; i < n; ++i) {
    if (i < (size_t)R * C && gotb[i] != got[i]) ++kernels_differ;  // both kernels: the same values
    if (got[i] == want[i]) continue;
    ++differ;
    // At most one bf16 step from the exactly rounded value (the step of want's binade; bf16's
    // subnormal step 2^-133 below 2^-126 and at 0).
    const double step =
        want[i] == 0.0 ? std::ldexp(1.0, -133) : std::ldexp(1.0, std::max(std::ilogb(want[i]), -126) - 7);
    if (std::fabs(got[i] - want[i]) > step) ++far;
  }
  CHECK(kernels_differ == 0);
  std::printf(
      "gelu bf16 derivative over %zu bf16 inputs: %zu differ from the exactly rounded value, %zu by more "
      "than one step\n",
      n, differ, far);
  CHECK(far == 0);
  CHECK(differ <= 64);  // of 33538 inputs; a float32 emulation of the kernel's arithmetic on the host: 7
}

namespace {
/// gelu_backward_bias with y against gelu_forward (y, bit for bit) and against the same call
/// without y (du and db, bit for bit), on one shape and precision.
template <typename T>
void check_recomputed_gelu(int R, int C, bool shift_y, Stream& st) {
  INFO("rows=" << R << " cols=" << C << (sizeof(T) == 2 ? " bf16" : " fp32") << (shift_y ? ", y unaligned" : ""));
  const size_t n = (size_t)R * C;
  std::vector<T> hu(n), hdy(n);
  const auto u0 = normal_vec(n, 31, 0, 3.0), dy0 = normal_vec(n, 31, 1);
  for (size_t i = 0; i < n; ++i) {
    if constexpr (sizeof(T) == 2) hu[i] = __float2bfloat16_rn((float)u0[i]), hdy[i] = __float2bfloat16_rn((float)dy0[i]);
    else hu[i] = (float)u0[i], hdy[i] = (float)dy0[i];
  }
  DevVec<T> u(hu), dya(hdy), dyb(hdy), yf(n), yb(n + 1);
  DevVec<float> dba(C), dbb(C), scratch(gelu_backward_bias_scratch_floats(R, C, sizeof(T) == 2));
  T* const y = yb.get() + (shift_y ? 1 : 0);  // +1 element: not 16-byte aligned, written by gelu_forward
  gelu_forward(u.get(), yf.get(), n, st.s);
  gelu_backward_bias(dya.get(), u.get(), dya.get(), R, C, dba.get(), false, scratch.get(), st.s);
  gelu_backward_bias(dyb.get(), u.get(), dyb.get(), R, C, dbb.get(), false, scratch.get(), st.s, y);
  CUDA_CHECK(cudaStreamSynchronize(st.s));
  auto bits_differ = [](const std::vector<T>& a, const T* b, size_t count) {
    size_t d = 0;
    for (size_t i = 0; i < count; ++i) d += std::memcmp(&a[i], b + i, sizeof(T)) != 0;
    return d;
  };
  const std::vector<T> forward = yf.download(), recomputed = yb.download();
  CHECK(bits_differ(forward, recomputed.data() + (shift_y ? 1 : 0), n) == 0);
  const std::vector<T> da = dya.download(), db = dyb.download();
  CHECK(bits_differ(da, db.data(), n) == 0);
  CHECK(dba.download() == dbb.download());
}
}  // namespace

TEST_CASE("gelu: the backward's recomputed GELU output (y) equals gelu_forward's bit for bit, du and db unchanged",
          "[gpu][gelu]") {
  REQUIRE_GPU();
  Stream st;
  // 37 x 4096: the fused kernel; 5 x 20: cols not a multiple of 8 (gelu_forward + gelu_backward
  // + column_sum); 40 x 1024 with y unaligned: gelu_forward for y, the fused kernel for the rest.
  check_recomputed_gelu<float>(37, 4096, false, st);
  check_recomputed_gelu<float>(5, 20, false, st);
  check_recomputed_gelu<float>(40, 1024, true, st);
  check_recomputed_gelu<bf16>(37, 4096, false, st);
  check_recomputed_gelu<bf16>(5, 20, false, st);
  check_recomputed_gelu<bf16>(40, 1024, true, st);
}
