// Gradient accumulation: k micro-steps of batch b take the same optimizer step as one step of k*b.
#include <cmath>
#include <vector>

#include "model/rng.h"
#include "src/engine.h"
#include "tests/catch.h"

using namespace vitddp;

TEST_CASE("2 micro-steps of batch 2 equal one step of batch 4 (GPU engine)", "[gpu][grad_accum]") {
  Options o;
  o.model = "vit_tiny";
  o.data_workers = 1;
  o.init = "random";
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
  auto whole = make_gpu_engine(o, w, L, {});
  o.batch_size = 2;
  o.grad_accum_steps = 2;
  auto accum = make_gpu_engine(o, w, L, {});
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
  double num = 0, den = 0;
  for (size_t i = 0; i < p1.size(); ++i) {
    num += ((double)p1[i] - p2[i]) * ((double)p1[i] - p2[i]);
    den += (double)p1[i] * p1[i];
  }
  CHECK(std::sqrt(num / den) <= 1e-5);  // fp32 GPU arithmetic, different reduction orders
  // And the step really moved the parameters (the comparison is not vacuous).
  auto fresh = make_gpu_engine(o, w, L, {});
  const auto p0 = fresh->parameters();
  double moved = 0;
  for (size_t i = 0; i < p0.size(); ++i) moved += std::fabs((double)p0[i] - p1[i]);
  CHECK(moved > 1e-2);
}
