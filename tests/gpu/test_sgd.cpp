// sgd_rest_after_backward and backward_update_tiles (cuda/kernels/sgd.h) against a host loop
// written from torch.optim.SGD's update (model/sgd.h): the elements outside the updated ranges
// get p - lr * (grad_scale * g + weight_decay * p), those inside stay, every one is checked for
// NaN/Inf and copied to bf16 (round to nearest even, tests/gpu/bf16_test_util.h).
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <utility>
#include <vector>

#include "cuda/kernels/sgd.h"
#include "tests/catch.h"
#include "tests/gpu/bf16_test_util.h"
#include "tests/gpu/gpu_test_util.h"

using namespace vitddp;
using namespace vitddp_test;

namespace {

/// Ranges that start and end inside tiles, cover whole tiles and touch the buffer's end.
const std::vector<std::pair<size_t, size_t>> kRanges = {{4, 1000}, {1500, 5120}, {8192, 8196}, {9000, 10240}};
constexpr size_t kN = 10240;

bool inside(size_t i) {
  for (const auto& [b, e] : kRanges)
    if (i >= b && i < e) return true;
  return false;
}

struct Map {
  DevVec<unsigned char> tiles;
  DevVec<size_t> bounds;
  BackwardUpdateMap map;
  Map(const std::vector<unsigned char>& t, const std::vector<size_t>& b)
      : tiles(t), bounds(b), map{tiles.get(), bounds.get(), (int)b.size()} {}
};

Map make_map() {
  std::vector<unsigned char> tiles;
  std::vector<size_t> bounds;
  backward_update_tiles(kRanges, kN, &tiles, &bounds);
  return Map(tiles, bounds);
}

}  // namespace

TEST_CASE("sgd: backward_update_tiles classifies tiles and refuses bad ranges", "[gpu][sgd]") {
  std::vector<unsigned char> tiles;
  std::vector<size_t> bounds;
  backward_update_tiles(kRanges, kN, &tiles, &bounds);
  REQUIRE(tiles.size() == kN / kSgdTile);
  CHECK(bounds == std::vector<size_t>{4, 1000, 1500, 5120, 8192, 8196, 9000, 10240});
  // Tile 0 [0, 1024): partly; 1 [1024, 2048): partly; 2-4: whole; 5-7: none; 8 [8192, 9216): partly; 9: whole.
  CHECK(tiles == std::vector<unsigned char>{2, 2, 1, 1, 1, 0, 0, 0, 2, 1});
  CHECK_THROWS_AS(backward_update_tiles({{2, 8}}, kN, &tiles, &bounds), std::invalid_argument);
  CHECK_THROWS_AS(backward_update_tiles({{8, 16}, {12, 20}}, kN, &tiles, &bounds), std::invalid_argument);
  CHECK_THROWS_AS(backward_update_tiles({{8, kN + 4}}, kN, &tiles, &bounds), std::invalid_argument);
}

TEST_CASE("sgd: sgd_rest_after_backward updates the other elements, checks and copies every one", "[gpu][sgd]") {
  REQUIRE_GPU();
  Stream st;
  const Map m = make_map();
  const std::vector<float> p0 = normal_vec(kN, 3, 0), g = normal_vec(kN, 3, 1);
  SgdConfig cfg;
  cfg.lr = 0.01;
  cfg.weight_decay = 0.1;
  cfg.grad_scale = 0.5;
  DevVec<float> dp(p0), dg(g);
  DevVec<__nv_bfloat16> d16(kN);
  DevVec<int> flag(std::vector<int>{0});
  sgd_rest_after_backward(dp.get(), dg.get(), kN, cfg, m.map, flag.get(), st.s, d16.get());
  CUDA_CHECK(cudaStreamSynchronize(st.s));
  const std::vector<float> p = dp.download();
  const std::vector<__nv_bfloat16> p16 = d16.download();
  size_t updated = 0, wrong = 0, wrong16 = 0;
  for (size_t i = 0; i < kN; ++i) {
    float want = p0[i];
    if (!inside(i)) {
      // model/sgd.h's order: g = grad_scale * grad + weight_decay * p; p -= lr * g (fp32).
      const float gi = std::fma((float)cfg.weight_decay, p0[i], (float)cfg.grad_scale * g[i]);
      want = p0[i] - (float)cfg.lr * gi;
      ++updated;
    }
    wrong += std::fabs(p[i] - want) > 1e-6f * std::fabs(want);  // the device may fuse p - lr * g into one FMA
    uint16_t bits;
    std::memcpy(&bits, &p16[i], 2);
    wrong16 += bits != bf16_bits(p[i]);
  }
  CHECK(updated == kN - (996 + 3620 + 4 + 1240));
  CHECK(wrong == 0);
  CHECK(wrong16 == 0);
  CHECK(flag.download()[0] == 0);

  // A non-finite value inside a range (already updated) and one from a gradient outside both raise the flag.
  for (const size_t bad : {size_t(3000), size_t(6000)}) {
    std::vector<float> pb = p0, gb = g;
    if (inside(bad))
      pb[bad] = std::numeric_limits<float>::infinity();
    else
      gb[bad] = std::numeric_limits<float>::quiet_NaN();
    DevVec<float> dpb(pb), dgb(gb);
    DevVec<int> f(std::vector<int>{0});
    sgd_rest_after_backward(dpb.get(), dgb.get(), kN, cfg, m.map, f.get(), st.s);
    CUDA_CHECK(cudaStreamSynchronize(st.s));
    INFO("non-finite element " << bad);
    CHECK(f.download()[0] == 1);
  }
  // Momentum, an odd length and a misaligned pointer are refused.
  SgdConfig mom = cfg;
  mom.momentum = 0.9;
  CHECK_THROWS_AS(sgd_rest_after_backward(dp.get(), dg.get(), kN, mom, m.map, flag.get(), st.s), std::invalid_argument);
  CHECK_THROWS_AS(sgd_rest_after_backward(dp.get(), dg.get(), kN - 2, cfg, m.map, flag.get(), st.s),
                  std::invalid_argument);
  CHECK_THROWS_AS(sgd_rest_after_backward(dp.get() + 1, dg.get(), kN - 4, cfg, m.map, flag.get(), st.s),
                  std::invalid_argument);
}

TEST_CASE("sgd: write_sgd_gemm_scalars gives -lr * grad_scale and 1 - lr * weight_decay", "[gpu][sgd]") {
  REQUIRE_GPU();
  Stream st;
  DevVec<float> d(2);
  SgdConfig cfg;
  cfg.lr = 0.25;
  cfg.weight_decay = 0.5;
  cfg.grad_scale = 0.5;
  write_sgd_gemm_scalars(cfg, d.get(), st.s);
  CUDA_CHECK(cudaStreamSynchronize(st.s));
  CHECK(d.download() == std::vector<float>{-0.125f, 0.875f});
}
