// The gradient-accumulation check shared by the CPU and GPU engine tests: k micro-steps of batch b
// take the same optimizer step as one step of k*b.
#pragma once
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "model/rng.h"
#include "src/engines/engine.h"
#include "tests/catch.h"
#include "tests/test_util.h"

namespace vitddp_test {

/// make_cpu_engine / make_gpu_engine.
using EngineFactory = std::unique_ptr<vitddp::Engine> (*)(const vitddp::Options&, const vitddp::World&,
                                                          const vitddp::ParamLayout&, std::vector<vitddp::Bucket>,
                                                          const std::vector<float>*);

/// Two optimizer steps (so momentum buffers are exercised too) of an engine from `make_engine`
/// with batch 4 against one with batch 2 and 2 accumulation steps, on the same 4 random samples,
/// without DDP. `base` gives the model and any backend settings; random init, lr 0.5, momentum
/// 0.9 and weight decay 0.01 are set here. CHECKs that the losses agree to a relative 1e-6 at
/// each step, that the final parameters agree to a norm-relative `param_tol`, and that the steps
/// moved the parameters (by more than 1e-2 in L1) so the comparison is not vacuous.
inline void check_grad_accum(vitddp::Options base, EngineFactory make_engine, double param_tol) {
  using namespace vitddp;
  Options o = base;
  o.init = InitScheme::Random;
  o.ddp = false;
  o.lr = 0.5;
  o.momentum = 0.9;
  o.weight_decay = 0.01;
  const ParamLayout L = make_param_layout(vit_config(o.model));
  const auto& c = L.cfg;
  const size_t img = (size_t)c.channels * c.image_size * c.image_size;
  std::vector<float> images(4 * img);
  std::vector<int32_t> labels(4);
  for (size_t i = 0; i < images.size(); ++i) images[i] = (float)rand_normal(9, 0, i);
  for (int i = 0; i < 4; ++i) labels[i] = (int32_t)(rand_bits(9, 1, i) % c.num_classes);
  const World w;

  o.batch_size = 4;
  o.grad_accum_steps = 1;
  auto whole = make_engine(o, w, L, {}, nullptr);
  o.batch_size = 2;
  o.grad_accum_steps = 2;
  auto accum = make_engine(o, w, L, {}, nullptr);
  StepRecord r1, r2;
  for (int step = 0; step < 2; ++step) {  // two steps: momentum buffers are exercised too
    whole->stage(HostBatch{images.data(), labels.data(), 4});
    whole->run_micro_step(0, 1);
    whole->finish_step(&r1);
    for (int j = 0; j < 2; ++j) {
      accum->stage(HostBatch{images.data() + j * 2 * img, labels.data() + j * 2, 2});
      accum->run_micro_step(j, 2);
    }
    accum->finish_step(&r2);
    CHECK(r2.loss == Approx(r1.loss).epsilon(1e-6));
  }
  const auto p1 = whole->parameters(), p2 = accum->parameters();
  CHECK(norm_rel_err(p2.data(), p1.data(), p1.size()) <= param_tol);
  // And the step really moved the parameters (the comparison is not vacuous).
  auto fresh = make_engine(o, w, L, {}, nullptr);
  const auto p0 = fresh->parameters();
  double moved = 0;
  for (size_t i = 0; i < p0.size(); ++i) moved += std::fabs((double)p0[i] - p1[i]);
  CHECK(moved > 1e-2);
}

}  // namespace vitddp_test
