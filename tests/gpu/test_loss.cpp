// Softmax cross-entropy of cuda/kernels/loss.h (softmax_xent: mean loss and logits gradient)
// against host loops in double written here (torch.nn.CrossEntropyLoss, mean). CPU twin: the loss
// of CpuViT's forward and backward in model/cpu_vit.cpp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "cuda/kernels/loss.h"
#include "model/rng.h"
#include "tests/catch.h"
#include "tests/gpu/gpu_test_util.h"

using namespace vitddp;
using namespace vitddp_test;

TEST_CASE("loss: softmax cross-entropy and its gradient match host loops", "[gpu][loss]") {
  REQUIRE_GPU();
  Stream st;
  const int B = 5, K = 1000;
  const auto hz = normal_vec((size_t)B * K, 6, 0, 3.0);
  std::vector<int32_t> hl(B);
  for (int b = 0; b < B; ++b) hl[b] = (int32_t)(vitddp::rand_bits(6, 1, b) % K);
  double loss = 0;
  std::vector<double> dz((size_t)B * K);
  for (int b = 0; b < B; ++b) {
    double mx = -1e300, s = 0;
    for (int k = 0; k < K; ++k) mx = std::max(mx, (double)hz[(size_t)b * K + k]);
    for (int k = 0; k < K; ++k) s += std::exp(hz[(size_t)b * K + k] - mx);
    loss += (std::log(s) + mx - hz[(size_t)b * K + hl[b]]) / B;
    for (int k = 0; k < K; ++k)
      dz[(size_t)b * K + k] = (std::exp(hz[(size_t)b * K + k] - mx) / s - (k == hl[b] ? 1 : 0)) / B;
  }
  DevVec<float> z(hz), dzd((size_t)B * K), l(1), scratch(softmax_xent_scratch_floats(B));
  DevVec<int32_t> lab(hl);
  softmax_xent(z.get(), lab.get(), B, K, l.get(), dzd.get(), scratch.get(), st.s);
  CHECK(std::fabs(l.download()[0] - loss) <= 1e-6 * std::fabs(loss));
  CHECK(norm_rel_err(dzd.download(), dz) < 1e-6);
  // An out-of-range label gives a NaN loss.
  hl[2] = K;
  lab.upload(hl);
  softmax_xent(z.get(), lab.get(), B, K, l.get(), dzd.get(), scratch.get(), st.s);
  CHECK(std::isnan(l.download()[0]));
}
