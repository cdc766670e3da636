// AdamW host reference (model/adamw.h) against PyTorch's formula written out by hand, and the
// learning-rate schedules (model/lr_schedule.h) against hand-computed values.
#include <cmath>
#include <functional>
#include <string>
#include <stdexcept>
#include <vector>

#include "model/adamw.h"
#include "model/lr_schedule.h"
#include "tests/catch.h"
#include "tests/test_util.h"

using namespace vitddp;

namespace {

// torch.optim.AdamW, written the way its documentation states the algorithm (bias-corrected
// moments, decoupled decay), in double, for one scalar and `steps` updates with gradients g[t]:
//   theta_t = theta_{t-1} - lr * wd * theta_{t-1}
//   m_t = b1 m_{t-1} + (1 - b1) g_t;  v_t = b2 v_{t-1} + (1 - b2) g_t^2
//   m^ = m_t / (1 - b1^t);  v^ = v_t / (1 - b2^t)
//   theta_t = theta_t - lr * m^ / (sqrt(v^) + eps)
double adamw_by_hand(double theta, const std::vector<double>& g, double lr, double b1, double b2, double eps,
                     double wd) {
  double m = 0, v = 0;
  for (size_t k = 0; k < g.size(); ++k) {
    const double t = static_cast<double>(k + 1);
    theta -= lr * wd * theta;
    m = b1 * m + (1 - b1) * g[k];
    v = b2 * v + (1 - b2) * g[k] * g[k];
    const double m_hat = m / (1 - std::pow(b1, t));
    const double v_hat = v / (1 - std::pow(b2, t));
    theta -= lr * m_hat / (std::sqrt(v_hat) + eps);
  }
  return theta;
}

// The message of the std::invalid_argument that `f` throws ("" if none).
std::string invalid_argument_message(const std::function<void()>& f) {
  return vitddp_test::message_of<std::invalid_argument>(f, "");
}

/// Three host AdamW steps (lr, betas b1 b2, eps, weight decay wd) with gradients g[0..2] from p0,
/// once in double (*pd) and once in float (*pf), moments starting at zero.
void adamw_3_steps_host(const std::vector<double>& p0, const std::vector<std::vector<double>>& g, double lr,
                        double b1, double b2, double eps, double wd, std::vector<double>* pd, std::vector<float>* pf) {
  AdamWConfig c;
  c.lr = lr;
  c.beta1 = b1;
  c.beta2 = b2;
  c.eps = eps;
  c.weight_decay = wd;
  const size_t n = p0.size();
  std::vector<double> md(n, 0), vd(n, 0);
  std::vector<float> mf(n, 0), vf(n, 0);
  *pd = p0;
  pf->assign(p0.begin(), p0.end());
  for (int t = 1; t <= 3; ++t) {
    const std::vector<float> gf(g[t - 1].begin(), g[t - 1].end());
    adamw_step_host(pd->data(), g[t - 1].data(), md.data(), vd.data(), n, c, t);
    adamw_step_host(pf->data(), gf.data(), mf.data(), vf.data(), n, c, t);
  }
}

bool close_rel(double a, double b, double rel) { return std::fabs(a - b) <= rel * std::fmax(std::fabs(b), 1e-30); }

}  // namespace

TEST_CASE("optim: AdamW first step by hand (m^ = g, v^ = g^2)", "[optim]") {
  // Step 1: m^ = g and v^ = g^2 exactly, so p1 = p0 (1 - lr wd) - lr g / (|g| + eps).
  AdamWConfig c;
  c.lr = 0.1;
  c.weight_decay = 0.01;
  double p = 1.0, g = 0.5, m = 0, v = 0;
  adamw_step_host(&p, &g, &m, &v, 1, c, 1);
  CHECK(close_rel(p, 0.999 - 0.1 * 0.5 / (0.5 + 1e-8), 1e-15));
  CHECK(close_rel(p, 0.899000002, 1e-12));
  CHECK(close_rel(m, 0.05, 1e-15));
  CHECK(close_rel(v, 0.00025, 1e-12));
  // PyTorch's defaults.
  const AdamWConfig d;
  CHECK(d.lr == 1e-3);
  CHECK(d.beta1 == 0.9);
  CHECK(d.beta2 == 0.999);
  CHECK(d.eps == 1e-8);
  CHECK(d.weight_decay == 1e-2);
}

TEST_CASE("optim: AdamW host matches PyTorch's formula over 3 steps on a few scalars", "[optim]") {
  const std::vector<double> p0 = {1.0, -2.0, 0.5, 0.0, 3e-3};
  const std::vector<std::vector<double>> g = {  // g[step][element]
      {0.5, -1.0, 1e-3, 2.0, -4e-9},
      {0.25, 0.5, -1e-3, -1.0, 1e-9},
      {-0.1, 0.3, 2e-3, 0.5, 3e-9}};
  struct Case {
    double lr, b1, b2, eps, wd;
  };
  for (const Case cs : {Case{1e-3, 0.9, 0.999, 1e-8, 1e-2}, Case{0.05, 0.8, 0.99, 1e-6, 0.1},
                        Case{0.01, 0.9, 0.95, 1e-8, 0.0}}) {
    const size_t n = p0.size();
    std::vector<double> pd;
    std::vector<float> pf;
    adamw_3_steps_host(p0, g, cs.lr, cs.b1, cs.b2, cs.eps, cs.wd, &pd, &pf);
    for (size_t i = 0; i < n; ++i) {
      std::vector<double> gi;
      for (const auto& row : g) gi.push_back(row[i]);
      const double want = adamw_by_hand(p0[i], gi, cs.lr, cs.b1, cs.b2, cs.eps, cs.wd);
      INFO("lr " << cs.lr << " betas " << cs.b1 << "," << cs.b2 << " eps " << cs.eps << " wd " << cs.wd
                 << " element " << i << ": host double " << pd[i] << ", float " << pf[i] << ", by hand " << want);
      CHECK(std::fabs(pd[i] - want) <= 1e-14 * std::fmax(1.0, std::fabs(want)));
      CHECK(std::fabs(pf[i] - want) <= 2e-6 * std::fmax(1e-3, std::fabs(want)));
    }
  }
}

TEST_CASE("optim: AdamW host reproduces what torch.optim.AdamW printed", "[optim]") {
  // The scalars of the previous case, 3 steps of torch.optim.AdamW(foreach=False) in PyTorch 2.11
  // (CPU), once in float64 and once in float32, as tests/reference/adamw_scalars.py prints them:
  //   p = torch.tensor(p0, dtype=..., requires_grad=True); opt = torch.optim.AdamW([p], lr=...,
  //   betas=(b1, b2), eps=..., weight_decay=..., foreach=False); 3 x (p.grad = g[t]; opt.step())
  const std::vector<double> p0 = {1.0, -2.0, 0.5, 0.0, 3e-3};
  const std::vector<std::vector<double>> g = {
      {0.5, -1.0, 1e-3, 2.0, -4e-9}, {0.25, 0.5, -1e-3, -1.0, 1e-9}, {-0.1, 0.3, 2e-3, 0.5, 3e-9}};
  struct Case {
    double lr, b1, b2, eps, wd;
    std::vector<double> torch64;
    std::vector<float> torch32;
  };
  const std::vector<Case> cases = {
      {1e-3, 0.9, 0.999, 1e-8, 1e-2,
       {0.9974411390082006, -1.9986405473624425, 0.4985394220541748, -0.0016067435153402938, 0.0033727590592660035},
       {0.997441113f, -1.99864042f, 0.498539388f, -0.00160674343f, 0.00337275886f}},
      {0.05, 0.8, 0.99, 1e-6, 0.1,
       {0.8637079134259285, -1.9119904641605578, 0.4220320842550236, -0.07524054346092542, 0.003187734594166078},
       {0.86370796f, -1.91199052f, 0.422032088f, -0.0752405524f, 0.00318773463f}},
      {0.01, 0.9, 0.95, 1e-8, 0.0,
       {0.97452560234604, -1.9869791408566804, 0.48560597936946936, -0.01615051067371106, 0.006730950863110165},
       {0.97452563f, -1.98697925f, 0.485605985f, -0.0161505099f, 0.0067309509f}}};
  for (const Case& cs : cases) {
    const size_t n = p0.size();
    std::vector<double> pd;
    std::vector<float> pf;
    adamw_3_steps_host(p0, g, cs.lr, cs.b1, cs.b2, cs.eps, cs.wd, &pd, &pf);
    for (size_t i = 0; i < n; ++i) {
      INFO("lr " << cs.lr << " element " << i << ": host " << pd[i] << " / " << pf[i] << "f, torch " << cs.torch64[i]
                 << " / " << cs.torch32[i] << "f");
      CHECK(std::fabs(pd[i] - cs.torch64[i]) <= 1e-14 * std::fmax(1.0, std::fabs(cs.torch64[i])));
      CHECK(std::fabs(pf[i] - cs.torch32[i]) <= 1.2e-7 * std::fabs(cs.torch32[i]));  // within 1 ulp
    }
  }
}

TEST_CASE("optim: AdamW grad_scale, scalars and argument checks", "[optim]") {
  AdamWConfig c;
  c.lr = 0.01;
  std::vector<double> p1 = {1.0, -1.0}, p2 = p1, m1(2, 0), v1(2, 0), m2(2, 0), v2(2, 0);
  const std::vector<double> g = {0.3, -0.7}, g2 = {0.6, -1.4};
  AdamWConfig half = c;
  half.grad_scale = 0.5;
  for (int t = 1; t <= 3; ++t) {
    adamw_step_host(p1.data(), g.data(), m1.data(), v1.data(), 2, c, t);
    adamw_step_host(p2.data(), g2.data(), m2.data(), v2.data(), 2, half, t);
  }
  CHECK(p1 == p2);

  const AdamWScalars s = adamw_scalars(c, 2);
  CHECK(s.decay == 1.0 - 0.01 * 0.01);
  CHECK(close_rel(s.step_size, 0.01 / (1 - 0.81), 1e-15));
  CHECK(close_rel(s.bc2_sqrt, std::sqrt(1 - 0.999 * 0.999), 1e-15));

  double x = 0;
  CHECK_THROWS_AS(adamw_step_host(&x, &x, &x, &x, 1, c, 0), std::invalid_argument);
  AdamWConfig bad = c;
  bad.beta2 = 1.0;
  CHECK_THROWS_AS(adamw_scalars(bad, 1), std::invalid_argument);
  bad = c;
  bad.eps = 0;
  CHECK_THROWS_AS(adamw_scalars(bad, 1), std::invalid_argument);
  bad = c;
  bad.lr = -1;
  CHECK_THROWS_AS(adamw_scalars(bad, 1), std::invalid_argument);
}

TEST_CASE("optim: constant schedule", "[optim]") {
  LrSchedule s;
  s.base_lr = 0.1;
  CHECK(s.lr_at(0) == 0.1);
  CHECK(s.lr_at(123456) == 0.1);
  CHECK_THROWS_AS(s.lr_at(-1), std::invalid_argument);
  CHECK(parse_lr_schedule("constant") == LrScheduleKind::Constant);
  CHECK(lr_schedule_name(LrScheduleKind::Constant) == "constant");
}

TEST_CASE("optim: warm-up + cosine schedule, hand-computed values", "[optim]") {
  LrSchedule s;
  s.kind = parse_lr_schedule("cosine");
  CHECK(lr_schedule_name(s.kind) == "cosine");
  s.base_lr = 1e-3;
  s.warmup_steps = 10;
  s.total_steps = 110;  // 100 cosine steps
  auto approx = [](double a, double b) { return std::fabs(a - b) <= 1e-15; };
  CHECK(s.lr_at(0) == 0.0);                  // transformers: step / warmup
  CHECK(approx(s.lr_at(1), 1e-4));
  CHECK(approx(s.lr_at(5), 5e-4));
  CHECK(approx(s.lr_at(9), 9e-4));
  CHECK(approx(s.lr_at(10), 1e-3));          // progress 0: the peak
  CHECK(approx(s.lr_at(35), 0.8535533905932737e-3));  // progress 1/4: (1 + cos(pi/4)) / 2
  CHECK(approx(s.lr_at(60), 0.5e-3));        // progress 1/2
  CHECK(approx(s.lr_at(85), 0.1464466094067262e-3));  // progress 3/4: (1 - cos(pi/4)) / 2
  CHECK(approx(s.lr_at(110), 0.0));          // progress 1
  CHECK(approx(s.lr_at(500), 0.0));          // held at min_lr after the end

  s.min_lr = 1e-4;  // min_lr + (base - min_lr) (1 + cos(pi p)) / 2
  CHECK(approx(s.lr_at(10), 1e-3));
  CHECK(approx(s.lr_at(60), 5.5e-4));
  CHECK(approx(s.lr_at(35), 1e-4 + 9e-4 * 0.8535533905932737));
  CHECK(approx(s.lr_at(110), 1e-4));
  CHECK(approx(s.lr_at(5), 5e-4));  // warm-up still starts from 0

  s.warmup_steps = 0;  // no warm-up: cosine from step 0
  s.min_lr = 0;
  s.total_steps = 4;
  CHECK(approx(s.lr_at(0), 1e-3));
  CHECK(approx(s.lr_at(2), 0.5e-3));
  CHECK(approx(s.lr_at(4), 0.0));
}

TEST_CASE("optim: invalid schedules are rejected naming the field", "[optim]") {
  LrSchedule s;
  s.kind = LrScheduleKind::WarmupCosine;
  s.base_lr = 0.1;
  s.warmup_steps = 10;
  s.total_steps = 10;
  CHECK(invalid_argument_message([&] { s.validate(); }).find("total_steps") != std::string::npos);
  s.total_steps = 20;
  s.min_lr = 0.2;
  CHECK(invalid_argument_message([&] { s.validate(); }).find("min_lr") != std::string::npos);
  s.min_lr = 0;
  s.warmup_steps = -1;
  CHECK(invalid_argument_message([&] { s.validate(); }).find("warmup_steps") != std::string::npos);
  s.warmup_steps = 0;
  s.base_lr = -1;
  CHECK(invalid_argument_message([&] { s.lr_at(0); }).find("base_lr") != std::string::npos);
  CHECK(invalid_argument_message([&] { parse_lr_schedule("linear"); }).find("'linear'") != std::string::npos);
}
