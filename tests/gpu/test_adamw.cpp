// The fused AdamW kernel (cuda/kernels/adamw.h) against the host reference (model/adamw.h).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <vector>

#include "cuda/kernels/adamw.h"
#include "model/adamw.h"
#include "tests/catch.h"
#include "tests/gpu/gpu_test_util.h"

using namespace vitddp;
using namespace vitddp_test;

TEST_CASE("adamw gpu: matches the host reference over 5 steps within 1e-6", "[gpu][adamw]") {
  REQUIRE_GPU();
  struct Case {
    size_t n;
    AdamWConfig cfg;
  };
  AdamWConfig scaled;
  scaled.lr = 0.05;
  scaled.beta1 = 0.8;
  scaled.beta2 = 0.99;
  scaled.eps = 1e-6;
  scaled.weight_decay = 0.1;
  scaled.grad_scale = 0.25;
  // 1,000,003: more elements than the grid covers in one pass, not a multiple of the block.
  for (const Case& c : {Case{1000003, AdamWConfig()}, Case{4097, scaled}, Case{1, AdamWConfig()}}) {
    INFO("n = " << c.n << ", lr " << c.cfg.lr << ", grad_scale " << c.cfg.grad_scale);
    std::vector<float> p = normal_vec(c.n, 31, 0, 0.05), m(c.n, 0.0f), v(c.n, 0.0f);
    DevVec<float> dp(p), dm(m), dv(v), dg(c.n);
    for (int step = 1; step <= 5; ++step) {
      // Gradients of mixed scale, some tiny (where eps matters) and some exactly zero.
      std::vector<float> g = normal_vec(c.n, 32, step, step % 2 ? 1.0 : 1e-3);
      for (size_t i = 0; i < c.n; i += 7) g[i] = 0.0f;
      for (size_t i = 3; i < c.n; i += 11) g[i] *= 1e-7f;
      dg.upload(g);
      adamw_step_host(p.data(), g.data(), m.data(), v.data(), c.n, c.cfg, step);
      adamw_step_gpu(dp.get(), dg.get(), dm.get(), dv.get(), c.n, c.cfg, step, nullptr);
      CUDA_CHECK(cudaDeviceSynchronize());
    }
    const std::vector<float> gp = dp.download(), gm = dm.download(), gv = dv.download();
    const double ep = norm_rel_err(gp, p), em = norm_rel_err(gm, m), ev = norm_rel_err(gv, v);
    double worst_abs = 0;
    for (size_t i = 0; i < c.n; ++i) worst_abs = std::fmax(worst_abs, std::fabs((double)gp[i] - p[i]));
    std::printf("AdamW GPU vs host, n = %zu: params %.3g, exp_avg %.3g, exp_avg_sq %.3g (norm-relative), "
                "worst |dp| %.3g\n", c.n, ep, em, ev, worst_abs);
    CHECK(ep <= 1e-6);
    CHECK(em <= 1e-6);
    CHECK(ev <= 1e-6);
  }
}

TEST_CASE("adamw gpu: invalid step or hyper-parameters throw before launching", "[gpu][adamw]") {
  REQUIRE_GPU();
  DevVec<float> d(4);
  CHECK_THROWS_AS(adamw_step_gpu(d.get(), d.get(), d.get(), d.get(), 4, AdamWConfig(), 0, nullptr),
                  std::invalid_argument);
  AdamWConfig bad;
  bad.beta1 = 1.0;
  CHECK_THROWS_AS(adamw_step_gpu(d.get(), d.get(), d.get(), d.get(), 4, bad, 1, nullptr), std::invalid_argument);
  adamw_step_gpu(d.get(), d.get(), d.get(), d.get(), 0, AdamWConfig(), 1, nullptr);  // n = 0: nothing to do
  CUDA_CHECK(cudaDeviceSynchronize());
}

TEST_CASE("adamw gpu: a set skip flag leaves parameters and state unchanged", "[gpu][adamw]") {
  REQUIRE_GPU();
  const size_t n = 1000;
  const std::vector<float> p0 = normal_vec(n, 41, 0), m0 = normal_vec(n, 41, 1, 0.1), v0(n, 0.5f);
  DevVec<float> dp(p0), dm(m0), dv(v0), dg(normal_vec(n, 41, 2));
  DevVec<int> skip(std::vector<int>{1});
  adamw_step_gpu(dp.get(), dg.get(), dm.get(), dv.get(), n, AdamWConfig(), 3, nullptr, skip.get());
  CHECK(dp.download() == p0);
  CHECK(dm.download() == m0);
  CHECK(dv.download() == v0);
  skip.upload(std::vector<int>{0});
  adamw_step_gpu(dp.get(), dg.get(), dm.get(), dv.get(), n, AdamWConfig(), 3, nullptr, skip.get());
  CHECK(dp.download() != p0);
}
