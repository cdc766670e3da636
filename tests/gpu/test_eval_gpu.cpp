// The evaluation pass on the GPU: eval_row_metrics (cuda/kernels/eval_metrics.h) against logits_metrics
// on the host, and GpuEngine::evaluate against CpuEngine::evaluate on the same parameters.
#include <cmath>
#include <vector>

#include "cuda/check/check_cuda.h"
#include "cuda/kernels/eval_metrics.h"
#include "model/param_layout.h"
#include "model/rng.h"
#include "model/vit_config.h"
#include "src/engines/engine.h"
#include "src/app/evaluation.h"
#include "tests/catch.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/test_util.h"

using namespace vitddp;
using namespace vitddp_test;

TEST_CASE("eval_row_metrics: per-row cross-entropy and top-1 as logits_metrics, ties to the first index",
          "[gpu][eval]") {
  REQUIRE_GPU();
  for (int classes : {1, 3, 10, 37, 1000}) {
    const int batch = 45;  // more rows than one block holds, the last block partial
    std::vector<float> z((size_t)batch * classes);
    for (size_t i = 0; i < z.size(); ++i) z[i] = (float)(3.0 * rand_normal(7, classes, i));
    std::vector<int32_t> labels(batch);
    for (int b = 0; b < batch; ++b) labels[b] = (int32_t)(rand_bits(8, classes, b) % classes);
    // Ties: row 0 has its maximum twice (the first wins), row 1 is constant (class 0 wins).
    if (classes > 2) {
      z[1] = z[classes - 1] = 50.0f;
      labels[0] = classes - 1;  // the second of the tied maxima: not correct
    }
    for (int k = 0; k < classes; ++k) z[(size_t)classes + k] = 0.25f;
    labels[1] = 0;
    for (int b = 2; b < batch; b += 3) z[(size_t)b * classes + labels[b]] += 8.0f;  // some rows correct

    Stream st;
    DevVec<float> dz(z), dloss(batch);
    DevVec<int32_t> dlab(labels), dcorrect(batch);
    eval_row_metrics(dz.get(), dlab.get(), batch, classes, dloss.get(), dcorrect.get(), st.s);
    CUDA_CHECK(cudaStreamSynchronize(st.s));
    const std::vector<float> loss = dloss.download();
    const std::vector<int32_t> correct = dcorrect.download();
    for (int b = 0; b < batch; ++b) {
      std::vector<double> row(z.begin() + (size_t)b * classes, z.begin() + (size_t)(b + 1) * classes);
      const EvalResult want = logits_metrics(row.data(), &labels[b], 1, classes);
      INFO("classes " << classes << ", row " << b);
      CHECK(correct[b] == want.correct);
      CHECK(loss[b] == Approx(want.loss_sum).epsilon(1e-5).margin(1e-6));
    }
  }
  // A label outside [0, classes): NaN loss, not correct.
  Stream st;
  DevVec<float> dz(std::vector<float>{1, 2, 3}), dloss(1);
  DevVec<int32_t> dlab(std::vector<int32_t>{3}), dcorrect(1);
  eval_row_metrics(dz.get(), dlab.get(), 1, 3, dloss.get(), dcorrect.get(), st.s);
  CUDA_CHECK(cudaStreamSynchronize(st.s));
  CHECK(std::isnan(dloss.download()[0]));
  CHECK(dcorrect.download()[0] == 0);
}

TEST_CASE("GpuEngine::evaluate equals CpuEngine::evaluate and leaves the parameters alone", "[gpu][eval]") {
  REQUIRE_GPU();
  Options o;
  o.model = "vit_fmnist_cpu";
  o.batch_size = 16;
  o.ddp = false;
  o.init = InitScheme::Random;
  o.eval_every = 1;  // eval buffers allocated with the rest
  const ParamLayout L = make_param_layout(vit_config(o.model));
  const World w;
  auto gpu = make_gpu_engine(o, w, L, {});
  auto cpu = make_cpu_engine(o, w, L, {});
  REQUIRE(gpu->parameters() == cpu->parameters());
  const auto images = random_images(L.cfg, 16, 31);
  const auto labels = random_labels(L.cfg, 16, 32);
  for (int n : {16, 5, 1}) {
    void* img = gpu->alloc_host(images.size() * sizeof(float));  // pinned, as the Evaluator's buffers
    std::copy(images.begin(), images.end(), static_cast<float*>(img));
    const EvalResult g = gpu->evaluate(HostBatch{static_cast<float*>(img), labels.data(), n});
    const EvalResult c = cpu->evaluate(HostBatch{images.data(), labels.data(), n});
    gpu->free_host(img);
    CHECK(g.count == n);
    CHECK(g.correct == c.correct);
    CHECK(g.loss_sum == Approx(c.loss_sum).epsilon(1e-5));
  }
  CHECK(gpu->parameters() == cpu->parameters());
}
