// The CPU backend's reducer under `mpirun -np 2`: averaging and data-parallel equivalence.
#include <mpi.h>

#include <cmath>
#include <vector>

#include "model/cpu_vit.h"
#include "model/init.h"
#include "model/rng.h"
#include "mpi/reducer/cpu_reducer.h"
#include "tests/catch.h"
#include "tests/mpi_test_util.h"
#include "tests/test_util.h"

using namespace vitddp;
using vitddp_test::norm_rel_err;
using vitddp_test::world_rank;
using vitddp_test::world_size;

namespace {

/// Runs one backward of `model` with the reducer hooked in, like the CPU engine does.
void reduce_backward(CpuViT<float>& model, const std::vector<float>& params, std::vector<float>& grads,
                     CpuReducer& reducer) {
  reducer.prepare_for_backward(std::chrono::steady_clock::now());
  model.backward(params.data(), grads.data(), false, [&](const std::vector<size_t>& p) { reducer.mark_ready(p); });
  reducer.finalize();
}

}  // namespace

TEST_CASE("MPI reducer averages every bucket: rank r holds r+1", "[mpi][reducer]") {
  REQUIRE(world_size() == 2);
  const bool overlap = GENERATE(true, false);  // --no-overlap launches every bucket in finalize()
  INFO("overlap " << overlap);
  const ParamLayout L = make_param_layout(vit_config("vit_tiny"));
  const auto buckets = assign_buckets(L, 4096, 65536);  // several buckets
  REQUIRE(buckets.size() > 3);
  std::vector<float> grads(L.total, (float)(world_rank() + 1));
  ReducerOptions ro;
  ro.overlap = overlap;
  CpuReducer reducer(L, buckets, grads.data(), world_size(), ro);
  reducer.prepare_for_backward(std::chrono::steady_clock::now());
  // Report parameters in gradient-ready order in small groups, as a backward pass would.
  const auto order = L.ready_order();
  for (size_t i = 0; i < order.size(); i += 3)
    reducer.mark_ready(std::vector<size_t>(order.begin() + i, order.begin() + std::min(order.size(), i + 3)));
  reducer.finalize();
  for (size_t i = 0; i < L.total; ++i) REQUIRE(grads[i] == 1.5f);
  const BucketTimes t = reducer.times();
  REQUIRE(t.start_ms.size() == buckets.size());
  for (size_t b = 0; b < buckets.size(); ++b) CHECK(t.end_ms[b] >= t.start_ms[b]);
}

TEST_CASE("2 ranks with batch b equal 1 rank with batch 2b (CPU backend)", "[mpi][reducer]") {
  REQUIRE(world_size() == 2);
  const int b = 3;
  const ParamLayout L = make_param_layout(vit_config("vit_tiny"));
  std::vector<float> params(L.total);
  init_params(L, InitScheme::Random, 7, params.data());
  const auto& c = L.cfg;
  const size_t img = (size_t)c.channels * c.image_size * c.image_size;
  std::vector<float> images(2 * b * img);
  std::vector<int32_t> labels(2 * b);
  for (size_t i = 0; i < images.size(); ++i) images[i] = (float)rand_normal(11, 0, i);
  for (int i = 0; i < 2 * b; ++i) labels[i] = (int32_t)(rand_bits(11, 1, i) % c.num_classes);

  // Reference: one replica, the whole batch of 2b.
  CpuViT<float> whole(L, 2 * b);
  std::vector<float> ref(L.total, 0.0f);
  whole.forward(params.data(), images.data(), labels.data(), 2 * b);
  whole.backward(params.data(), ref.data(), false);

  // Data parallel: rank r takes samples [r b, (r+1) b), then the reducer averages.
  const int r = world_rank();
  CpuViT<float> half(L, b);
  std::vector<float> grads(L.total, 0.0f);
  half.forward(params.data(), images.data() + r * b * img, labels.data() + r * b, b);
  CpuReducer reducer(L, assign_buckets(L, 1 << 20, 25 << 20), grads.data(), 2, ReducerOptions{});
  reduce_backward(half, params, grads, reducer);
  for (const auto& p : L.params) {
    INFO(p.name);
    CHECK(norm_rel_err(grads.data() + p.offset, ref.data() + p.offset, p.numel) <= 1e-5);
  }
}
