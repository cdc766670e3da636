// Tests of the CPU reference ViT (model/cpu_vit.h): finite-difference gradients, on_ready order,
// accumulation, a hand-computed case, float vs double, and argument checks.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/cpu_vit.h"
#include "model/grad_ready.h"
#include "model/init.h"
#include "model/rng.h"
#include "tests/catch.h"
#include "tests/test_util.h"

using namespace vitddp;
using vitddp_test::expected_groups;
using vitddp_test::random_images;
using vitddp_test::random_labels;
using vitddp_test::random_params;

namespace {

/// Up to `n` entries of a tensor of `numel` elements: always the first and the last, the rest
/// spread evenly in between.
std::vector<size_t> sample_entries(size_t numel, size_t n) {
  std::set<size_t> s;
  if (numel <= n) {
    for (size_t i = 0; i < numel; ++i) s.insert(i);
  } else {
    for (size_t k = 0; k < n; ++k) s.insert(k * (numel - 1) / (n - 1));
  }
  return {s.begin(), s.end()};
}

}  // namespace

TEST_CASE("cpu_vit: gradients match central finite differences (vit_micro, double)", "[cpu_vit]") {
  const ParamLayout L = make_param_layout(vit_config("vit_micro"));
  const int B = 3;
  std::vector<double> params = random_params<double>(L, 11);
  const std::vector<float> img = random_images(L.cfg, B, 21);
  const std::vector<int32_t> lab = random_labels(L.cfg, B, 31);

  CpuViT<double> model(L, B);
  model.forward(params.data(), img.data(), lab.data(), B);
  std::vector<double> grads(L.total, 0.0);
  model.backward(params.data(), grads.data(), false);

  const double h = 1e-5;
  double worst = 0.0;
  std::string worst_name;
  for (const ParamInfo& p : L.params) {
    double diff2 = 0.0, norm2 = 0.0;
    for (size_t e : sample_entries(p.numel, 8)) {
      const size_t at = p.offset + e;
      const double keep = params[at];
      params[at] = keep + h;
      const double lp = model.forward(params.data(), img.data(), lab.data(), B);
      params[at] = keep - h;
      const double lm = model.forward(params.data(), img.data(), lab.data(), B);
      params[at] = keep;
      const double fd = (lp - lm) / (2 * h);
      diff2 += (fd - grads[at]) * (fd - grads[at]);
      norm2 += grads[at] * grads[at];
    }
    INFO(p.name);
    REQUIRE(norm2 > 0.0);  // Random init gives every tensor a non-trivial gradient
    const double rel = std::sqrt(diff2 / norm2);
    CHECK(rel <= 1e-6);
    if (rel > worst) {
      worst = rel;
      worst_name = p.name;
    }
  }
  std::printf("cpu_vit finite differences: max norm-relative error %.3g (%s)\n", worst, worst_name.c_str());
}

TEST_CASE("cpu_vit: on_ready reports every parameter once, in the documented group order", "[cpu_vit]") {
  const ParamLayout L = make_param_layout(vit_config("vit_micro"));
  const int B = 2;
  const std::vector<double> params = random_params<double>(L, 5);
  const std::vector<float> img = random_images(L.cfg, B, 6);
  const std::vector<int32_t> lab = random_labels(L.cfg, B, 7);
  CpuViT<double> model(L, B);
  model.forward(params.data(), img.data(), lab.data(), B);

  std::vector<double> grads(L.total, 0.0);
  std::vector<std::vector<size_t>> reported;
  std::map<size_t, std::vector<double>> at_report;  // gradient slice as seen when reported
  model.backward(params.data(), grads.data(), false, [&](const std::vector<size_t>& idx) {
    reported.push_back(idx);
    for (size_t i : idx) {
      const ParamInfo& p = L.params[i];
      at_report[i].assign(grads.begin() + p.offset, grads.begin() + p.offset + p.numel);
    }
  });

  const std::vector<std::set<size_t>> expected = expected_groups(L);
  REQUIRE(reported.size() == expected.size());
  std::multiset<size_t> all;
  for (size_t gi = 0; gi < reported.size(); ++gi) {
    INFO("group " << gi);
    CHECK(std::set<size_t>(reported[gi].begin(), reported[gi].end()) == expected[gi]);
    all.insert(reported[gi].begin(), reported[gi].end());
  }
  REQUIRE(all.size() == L.params.size());
  for (size_t i = 0; i < L.params.size(); ++i) CHECK(all.count(i) == 1);
  // A reported gradient is final: it already holds the value it has after backward() returns.
  for (const auto& [i, slice] : at_report) {
    const ParamInfo& p = L.params[i];
    INFO(p.name);
    CHECK(std::equal(slice.begin(), slice.end(), grads.begin() + p.offset));
  }
}

TEST_CASE("grad_ready_groups: the groups CpuViT reports, in order; runs of the ready order; GradReadyOrder",
          "[cpu_vit][grad_ready]") {
  for (const char* name : {"vit_micro", "vit_tiny"}) {
    INFO(name);
    const ParamLayout L = make_param_layout(vit_config(name));
    const int B = 2;
    const std::vector<float> params = random_params<float>(L, 15);
    const std::vector<float> img = random_images(L.cfg, B, 16);
    const std::vector<int32_t> lab = random_labels(L.cfg, B, 17);
    CpuViT<float> model(L, B);
    model.forward(params.data(), img.data(), lab.data(), B);
    std::vector<float> grads(L.total, 0.0f);
    std::vector<std::vector<size_t>> reported;
    model.backward(params.data(), grads.data(), false, [&](const std::vector<size_t>& p) { reported.push_back(p); });

    const std::vector<std::vector<size_t>> groups = grad_ready_groups(L);
    CHECK(groups.size() == 6 * (size_t)L.cfg.layers + 4);
    CHECK(reported == groups);  // the same groups, in the same order, each as reported
    const std::vector<std::set<size_t>> documented = expected_groups(L);
    REQUIRE(groups.size() == documented.size());
    for (size_t g = 0; g < groups.size(); ++g) CHECK(std::set<size_t>(groups[g].begin(), groups[g].end()) == documented[g]);
    // Concatenated, the groups are the gradient-ready order (the flat buffer's), except that
    // class_token (registration index 0, the buffer's last tensor) comes with pos_embedding.
    std::vector<size_t> flat;
    for (const auto& g : groups) flat.insert(flat.end(), g.begin(), g.end());
    std::vector<size_t> want = L.ready_order();
    want.pop_back();
    want.insert(want.end() - 2, L.index_of("class_token"));  // after encoder.pos_embedding
    CHECK(flat == want);
    // The flat prefix complete after each group: the groups' sizes summed, but after
    // {pos_embedding, class_token} only up to conv_proj.bias (class_token lies past conv_proj).
    const std::vector<size_t> prefix = grad_ready_prefix_elements(L);
    REQUIRE(prefix.size() == groups.size());
    size_t sum = 0;
    for (size_t g = 0; g < groups.size(); ++g) {
      INFO("group " << g);
      for (size_t p : groups[g]) sum += (L.params[p].numel + 3) / 4 * 4;
      const size_t pos_group = groups.size() - 2;
      CHECK(prefix[g] == (g == pos_group ? L.params[L.index_of("conv_proj.bias")].offset : sum));
    }
    CHECK(prefix.back() == L.total);

    GradReadyOrder order(L);
    for (size_t g = 0; g < groups.size(); ++g) CHECK(order.next(reported[g]) == g);
    CHECK(order.reported() == groups.size());
    CHECK_THROWS_AS(order.next(reported[0]), std::logic_error);  // after the last group
    order.reset();
    CHECK_THROWS_AS(order.next(reported[1]), std::logic_error);  // not the next group
    const std::vector<size_t> swapped = {reported[0][1], reported[0][0]};
    CHECK_THROWS_AS(order.next(swapped), std::logic_error);     // another order inside the group
    CHECK(order.next(reported[0]) == 0);
  }
  // vit_l_32: 24 blocks -> 148 groups (the events per step of --record-grad-ready).
  CHECK(grad_ready_groups(make_param_layout(vit_config("vit_l_32"))).size() == 148);
}

TEST_CASE("cpu_vit: accumulate=true adds, padding is left untouched", "[cpu_vit]") {
  const ParamLayout L = make_param_layout(vit_config("vit_micro"));
  REQUIRE(L.total > L.parameter_count());  // heads.head.bias has 5 entries, padded to 8
  const int B = 3;
  const std::vector<double> params = random_params<double>(L, 8);
  const std::vector<float> img = random_images(L.cfg, B, 9);
  const std::vector<int32_t> lab = random_labels(L.cfg, B, 10);
  CpuViT<double> model(L, B);
  model.forward(params.data(), img.data(), lab.data(), B);

  const double sentinel = 12345.0;
  std::vector<double> once(L.total, sentinel), twice(L.total, sentinel);
  model.backward(params.data(), once.data(), false);
  model.backward(params.data(), twice.data(), false);
  model.backward(params.data(), twice.data(), true);

  std::vector<bool> is_param(L.total, false);
  for (const ParamInfo& p : L.params)
    for (size_t i = 0; i < p.numel; ++i) is_param[p.offset + i] = true;
  for (size_t i = 0; i < L.total; ++i) {
    if (is_param[i]) {
      CHECK(once[i] != sentinel);
      CHECK(twice[i] == Approx(2 * once[i]).epsilon(1e-14).margin(1e-300));
    } else {
      CHECK(once[i] == sentinel);
      CHECK(twice[i] == sentinel);
    }
  }
}

TEST_CASE("cpu_vit: hand-computed case (only the head bias non-zero)", "[cpu_vit]") {
  const ParamLayout L = make_param_layout(vit_config("vit_micro"));
  const int B = 2, K = L.cfg.num_classes;
  REQUIRE(K == 5);
  std::vector<double> params(L.total, 0.0);
  const double hb[5] = {1.0, 2.0, 0.0, -1.0, 0.5};
  std::copy(hb, hb + 5, params.begin() + L.params[L.index_of("heads.head.bias")].offset);
  const std::vector<float> img = random_images(L.cfg, B, 3);
  const std::vector<int32_t> lab = {0, 3};

  CpuViT<double> model(L, B);
  const double loss = model.forward(params.data(), img.data(), lab.data(), B);
  // Every activation is 0 (zero weights, LayerNorm weights 0), so the logits are the head bias.
  for (int b = 0; b < B; ++b)
    for (int k = 0; k < K; ++k) CHECK(model.logits()[b * K + k] == Approx(hb[k]).epsilon(1e-15));
  // log-sum-exp of {1, 2, 0, -1, 0.5}
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + 1.0 + std::exp(-1.0) + std::exp(0.5));
  CHECK(loss == Approx(0.5 * ((lse - 1.0) + (lse - (-1.0)))).epsilon(1e-14));

  // d loss / d head.bias = softmax(hb) - mean one-hot(labels); all other gradients are 0.
  std::vector<double> grads(L.total, 0.0);
  model.backward(params.data(), grads.data(), false);
  const size_t ob = L.params[L.index_of("heads.head.bias")].offset;
  for (int k = 0; k < K; ++k) {
    const double expect = std::exp(hb[k] - lse) - ((k == 0 ? 0.5 : 0.0) + (k == 3 ? 0.5 : 0.0));
    CHECK(grads[ob + k] == Approx(expect).epsilon(1e-14).margin(1e-15));
  }
  for (size_t i = 0; i < L.params.size(); ++i) {
    if (L.params[i].name == "heads.head.bias") continue;
    for (size_t e = 0; e < L.params[i].numel; ++e) CHECK(grads[L.params[i].offset + e] == 0.0);
  }

  // Torchvision init zeroes the head: uniform logits, loss log(K).
  init_params(L, InitScheme::Torchvision, 1, params.data());
  CHECK(model.forward(params.data(), img.data(), lab.data(), B) == Approx(std::log(5.0)).epsilon(1e-14));
}

TEST_CASE("cpu_vit: images of a batch are independent", "[cpu_vit]") {
  const ParamLayout L = make_param_layout(vit_config("vit_micro"));
  const int B = 3, K = L.cfg.num_classes;
  const size_t per_image = static_cast<size_t>(L.cfg.channels) * L.cfg.image_size * L.cfg.image_size;
  const std::vector<double> params = random_params<double>(L, 4);
  const std::vector<float> img = random_images(L.cfg, B, 44);
  const std::vector<int32_t> lab = random_labels(L.cfg, B, 45);
  CpuViT<double> model(L, B);
  model.forward(params.data(), img.data(), lab.data(), B);
  const std::vector<double> all = model.logits();
  REQUIRE(all.size() == static_cast<size_t>(B * K));
  for (int b = 0; b < B; ++b) {
    model.forward(params.data(), img.data() + b * per_image, lab.data() + b, 1);
    REQUIRE(model.logits().size() == static_cast<size_t>(K));
    for (int k = 0; k < K; ++k) CHECK(model.logits()[k] == Approx(all[b * K + k]).epsilon(1e-13));
  }
}

TEST_CASE("cpu_vit: float storage agrees with double storage (vit_tiny)", "[cpu_vit]") {
  const ParamLayout L = make_param_layout(vit_config("vit_tiny"));
  const int B = 4;
  const std::vector<double> pd = random_params<double>(L, 3);
  const std::vector<float> pf = random_params<float>(L, 3);
  const std::vector<float> img = random_images(L.cfg, B, 4);
  const std::vector<int32_t> lab = random_labels(L.cfg, B, 5);

  CpuViT<double> md(L, B);
  CpuViT<float> mf(L, B);
  const double ld = md.forward(pd.data(), img.data(), lab.data(), B);
  const double lf = mf.forward(pf.data(), img.data(), lab.data(), B);
  CHECK(lf == Approx(ld).epsilon(1e-5));
  double scale = 0.0, diff = 0.0;
  for (size_t i = 0; i < md.logits().size(); ++i) {
    scale = std::max(scale, std::fabs(md.logits()[i]));
    diff = std::max(diff, std::fabs(md.logits()[i] - mf.logits()[i]));
  }
  REQUIRE(scale > 0.0);
  CHECK(diff / scale <= 1e-5);

  std::vector<double> gd(L.total, 0.0);
  std::vector<float> gf(L.total, 0.0f);
  md.backward(pd.data(), gd.data(), false);
  mf.backward(pf.data(), gf.data(), false);
  double d2 = 0.0, n2 = 0.0;
  for (size_t i = 0; i < L.total; ++i) {
    d2 += (gd[i] - gf[i]) * (gd[i] - gf[i]);
    n2 += gd[i] * gd[i];
  }
  CHECK(std::sqrt(d2 / n2) <= 1e-4);
}

TEST_CASE("cpu_vit: invalid arguments are rejected", "[cpu_vit]") {
  const ParamLayout L = make_param_layout(vit_config("vit_micro"));
  const std::vector<double> params = random_params<double>(L, 1);
  const std::vector<float> img = random_images(L.cfg, 3, 2);
  CpuViT<double> model(L, 2);
  std::vector<double> grads(L.total, 0.0);
  CHECK_THROWS_AS(model.backward(params.data(), grads.data(), false), std::logic_error);

  auto message = [&](std::vector<int32_t> lab, int batch) -> std::string {
    try {
      model.forward(params.data(), img.data(), lab.data(), batch);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  CHECK(message({0, 0, 0}, 3).find("batch 3") != std::string::npos);
  CHECK(message({0}, 0).find("batch 0") != std::string::npos);
  CHECK(message({0, 5}, 2).find("label 5") != std::string::npos);
  CHECK(message({-1, 0}, 2).find("label -1") != std::string::npos);
  CHECK(message({4, 0}, 2).empty());
  CHECK_THROWS_AS(CpuViT<double>(L, 0), std::invalid_argument);
}

// Not run by default: `cpu_tests "[.perf]"`.
TEST_CASE("cpu_vit: time of forward+backward, vit_tiny batch 32 float", "[.perf]") {
  const ParamLayout L = make_param_layout(vit_config("vit_tiny"));
  const int B = 32, reps = 20;
  const std::vector<float> params = random_params<float>(L, 1);
  const std::vector<float> img = random_images(L.cfg, B, 2);
  const std::vector<int32_t> lab = random_labels(L.cfg, B, 3);
  std::vector<float> grads(L.total);
  CpuViT<float> model(L, B);
  model.forward(params.data(), img.data(), lab.data(), B);  // warm-up
  model.backward(params.data(), grads.data(), false);
  // The machine may be shared: report the median and the fastest repetition.
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    model.forward(params.data(), img.data(), lab.data(), B);
    model.backward(params.data(), grads.data(), false);
    ms.push_back(1e3 * std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  std::printf("vit_tiny batch 32 float: forward+backward %.2f ms median, %.2f ms fastest\n",
              ms[ms.size() / 2], ms.front());
}
