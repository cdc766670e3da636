// PyTorch as the oracle in CI: the CPU reference model (CpuViT<double>) and SGD (sgd_step_host)
// against tests/data/twin_vit_micro.h5, which tests/reference/torch_twin.py wrote from torchvision's
// VisionTransformer at vit_micro's size, trained by PyTorch 2.11 on the CPU (fp32):
//   python3 tests/reference/torch_twin.py --model vit_micro --batch 4 --seed 0 --random-head \
//       --device cpu --out tests/data/twin_vit_micro.h5
// The GPU counterpart on vit_b_32 / vit_l_32 is tests/gpu/test_torch_parity.cpp.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "model/cpu_vit.h"
#include "model/sgd.h"
#include "src/io/weights_io.h"
#include "tests/catch.h"
#include "tests/test_util.h"

using namespace vitddp;
using vitddp_test::norm_rel_err;

TEST_CASE("torch twin (CPU): CpuViT and SGD match PyTorch on vit_micro", "[weights][torch]") {
  const ParamLayout L = make_param_layout(vit_config("vit_micro"));
  const TwinReference r = load_twin_reference(std::string(VITDDP_TEST_DATA) + "/twin_vit_micro.h5", L);
  REQUIRE(r.batch == 4);
  CHECK(r.torch_version.rfind("2.", 0) == 0);

  std::vector<double> p(r.params.begin(), r.params.end()), g(L.total), mom(L.total);
  CpuViT<double> cpu(L, r.batch);
  std::vector<double> logits0, grads0;
  double loss0 = 0;
  for (int step = 0; step < 3; ++step) {
    const double loss = cpu.forward(p.data(), r.images.data(), r.labels.data(), r.batch);
    cpu.backward(p.data(), g.data(), false);
    if (step == 0) {
      logits0 = cpu.logits();
      loss0 = loss;
      grads0 = g;
    }
    sgd_step_host(p.data(), g.data(), mom.data(), L.total, r.sgd, step == 0);
  }
  const double logit_err = norm_rel_err(logits0.data(), r.logits.data(), logits0.size());
  const double loss_err = std::fabs(loss0 - r.loss) / std::fabs(r.loss);
  std::printf("vit_micro vs PyTorch %s (CPU): logits %.3g, loss %.3g (%.9g vs %.9g)\n", r.torch_version.c_str(),
              logit_err, loss_err, loss0, (double)r.loss);
  CHECK(logit_err <= 1e-5);
  CHECK(loss_err <= 1e-6);
  for (const ParamInfo& q : L.params) {
    const double eg = norm_rel_err(grads0.data() + q.offset, r.grads.data() + q.offset, q.numel);
    const double ea = norm_rel_err(p.data() + q.offset, r.params_after_3_steps.data() + q.offset, q.numel);
    INFO(q.name << ": gradient " << eg << ", params after 3 SGD steps " << ea);
    CHECK(eg <= 1e-4);
    CHECK(ea <= 1e-5);
  }
}
