// ZeRO stage 1 (--shard-optimizer) on one GPU equals --no-ddp bit for bit: the shard is the whole
// model, the in-place reduce-scatter and all-gather of one rank leave the buffers as they are, the
// optimizer runs the same element-wise kernels bucket by bucket, and the next forward waits for
// each bucket's all-gather event (inside the CUDA graph too). GEMM algorithms are chosen without
// autotuning, so both engines use the same ones. The sharded engine needs an NCCL communicator,
// hence MPI: ctest runs these under `mpirun -np 1` (gpu_tests_zero_np1); the hidden tag keeps them
// out of the plain gpu_tests run.
// The bf16 all-gather (--allgather-dtype bf16, forced on one rank): after every step the model's
// bf16 copy is the round of the fp32 masters and the fp32 parameters the bf16 model reads are
// float(bf16(master)); from a start whose fp32-read parameters are bf16 values the first update
// equals --no-ddp's bit for bit; a checkpoint resumes bit for bit; the losses stay within bf16's
// tolerance of --no-ddp's. A GpuViT case (no MPI) shows the fp32-read list complete: the other
// fp32 entries poisoned with NaN change nothing in the bf16 forward and backward.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "cuda/kernels/cast.h"
#include "cuda/model/gpu_vit.h"
#include "model/init.h"
#include "mpi/hooks/half_host.h"
#include "mpi/world/world.h"
#include "src/engines/engine.h"
#include "tests/catch.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/test_util.h"
#include "tests/zero_check.h"

using namespace vitddp;
using vitddp_test::run_zero_steps;

using vitddp_test::zero_options;

TEST_CASE("one GPU: --shard-optimizer equals --no-ddp bit for bit (fp32, bf16; SGD, AdamW; CUDA graph)",
          "[.][gpu][zero]") {
  REQUIRE_GPU();
  REQUIRE(mpi_active());  // run under mpirun -np 1 (gpu_tests_zero_np1)
  const World w = vitddp_test::node_world();
  REQUIRE(w.world_size == 1);
  const ParamLayout L = make_param_layout(vit_config("vit_micro"));
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--momentum", "0.9", "--weight-decay", "0.01"},
        {"--optimizer", "adamw", "--weight-decay", "0.05", "--lr", "0.01"},
        {"--momentum", "0.9", "--precision", "bf16"},
        {"--optimizer", "adamw", "--precision", "bf16", "--cuda-graph", "off"}}) {
    std::vector<std::string> za = args, na = args;
    za.push_back("--shard-optimizer");
    Options on = zero_options("gpu", na);  // --no-ddp takes no bucket options: set the flag
    on.ddp = false;
    Options oz = zero_options("gpu", za);
    on.checkpoint_every = oz.checkpoint_every = 1000;  // no GEMM autotuning (a checkpointed run's choice)
    auto zero = make_gpu_engine(oz, w, L, run_buckets(oz, L), nullptr);
    auto alone = make_gpu_engine(on, w, L, {}, nullptr);
    const auto recs = run_zero_steps({alone.get(), zero.get()}, L, 5, 1);
    INFO(to_string(oz.optimizer) << ", " << to_string(oz.precision) << ", cuda graph " << oz.cuda_graph);
    CHECK(recs[1].loss == recs[0].loss);
    CHECK(zero->parameters() == alone->parameters());
    const TrainState sz = zero->train_state(), sa = alone->train_state();
    CHECK(sz.params == sa.params);
    REQUIRE(sz.optimizer.size() == sa.optimizer.size());
    for (size_t k = 0; k < sa.optimizer.size(); ++k) CHECK(sz.optimizer[k].second == sa.optimizer[k].second);
    CHECK(sz.optimizer_steps == 5);
    for (size_t b = 0; b < recs[1].buckets.allgather_bytes.size(); ++b) CHECK(recs[1].buckets.allgather_bytes[b] > 0);
  }
}

namespace {

/// One optimizer step of `e` on the batch of step `s` (the batches and learning rates of
/// run_zero_steps: rank 0's seed 1000 + 100 s, lr 0.02 at step 0, 0.05 after).
StepRecord one_step(Engine& e, const ParamLayout& L, int s) {
  e.set_lr(s == 0 ? 0.02 : 0.05);
  const uint64_t seed = 1000 + 100 * s;
  const auto images = vitddp_test::random_images(L.cfg, 2, seed);
  const auto labels = vitddp_test::random_labels(L.cfg, 2, seed);
  e.stage(HostBatch{images.data(), labels.data(), 2});
  e.run_micro_step(0, 1);
  e.wait_staged_copy();
  StepRecord r;
  e.finish_step(&r);
  return r;
}

/// The seeded start of zero_options (--init random --seed 3) with every parameter the bf16 model
/// reads in fp32 rounded to bf16, so that the bf16 all-gather's model reads what --no-ddp's reads.
std::vector<float> bf16_read_start(const ParamLayout& L) {
  std::vector<float> p(L.total, 0.0f);
  init_params(L, InitScheme::Random, 3, p.data());
  for (const ParamRef& r : bf16_model_fp32_params(L))
    for (size_t i = r.offset; i < r.offset + r.numel; ++i) p[i] = bf16_to_float(float_to_bf16(p[i]));
  return p;
}

}  // namespace

TEST_CASE("one GPU, --allgather-dtype bf16: the model reads bf16 rounds of the fp32 masters; step 1 equals --no-ddp; "
          "a resume continues bit for bit",
          "[.][gpu][zero]") {
  REQUIRE_GPU();
  REQUIRE(mpi_active());  // run under mpirun -np 1 (gpu_tests_zero_np1)
  const World w = vitddp_test::node_world();
  REQUIRE(w.world_size == 1);
  const ParamLayout L = make_param_layout(vit_config("vit_micro"));
  const std::vector<float> start = bf16_read_start(L);
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--momentum", "0.9", "--weight-decay", "0.01", "--precision", "bf16"},
        {"--optimizer", "adamw", "--weight-decay", "0.05", "--lr", "0.01", "--precision", "bf16"}}) {
    std::vector<std::string> za = args;
    for (const char* a : {"--shard-optimizer", "--allgather-dtype", "bf16"}) za.push_back(a);
    Options on = vitddp_test::zero_options("gpu", args);
    on.ddp = false;
    Options oz = vitddp_test::zero_options("gpu", za);
    REQUIRE(allgather_in_bf16(oz, 1));
    on.checkpoint_every = oz.checkpoint_every = 1000;  // no GEMM autotuning: the same algorithms in every engine
    const auto buckets = run_buckets(oz, L);
    auto alone = make_gpu_engine(on, w, L, {}, &start);
    auto zero = make_gpu_engine(oz, w, L, buckets, &start);
    INFO(to_string(oz.optimizer));
    // Start-up: the masters are the start, the model copies derive from them.
    CHECK(zero->parameters() == start);
    const vitddp_test::Bf16GatherCheck c0 = vitddp_test::check_bf16_gather(*zero, L, start, start);
    CHECK(c0.bf16 == 0);
    CHECK(c0.fp32_read == 0);
    CHECK(c0.untouched == 0);
    CHECK(c0.fp32_read_elements > 0);
    const int steps = 5;
    std::vector<double> lz, la;
    for (int s = 0; s < steps; ++s) {
      INFO("step " << s);
      const StepRecord rz = one_step(*zero, L, s), ra = one_step(*alone, L, s);
      lz.push_back(rz.loss);
      la.push_back(ra.loss);
      const std::vector<float> masters = zero->parameters();
      // (b) The same forward, backward and element-wise update as --no-ddp before the first
      // difference (the fp32-read parameters of step 2 on are rounds of the masters).
      if (s == 0) {
        CHECK(rz.loss == ra.loss);
        CHECK(masters == alone->parameters());
        CHECK(masters != start);
      }
      // (a) The model's copies after the update's all-gather.
      const vitddp_test::Bf16GatherCheck c = vitddp_test::check_bf16_gather(*zero, L, masters, start);
      CHECK(c.bf16 == 0);
      CHECK(c.fp32_read == 0);
      CHECK(c.untouched == 0);
      // The all-gathers this step's forward waited for moved bf16 (none before the first step).
      for (size_t b = 0; b < buckets.size(); ++b)
        CHECK(rz.buckets.allgather_bytes[b] == (s == 0 ? 0 : buckets[b].numel * 2));
    }
    // (d) The loss trajectory within bf16's tolerance of --no-ddp's (3e-2, the bf16 model's tolerance).
    for (int s = 0; s < steps; ++s) CHECK(lz[s] == Approx(la[s]).epsilon(3e-2));
    // (c) A checkpoint after step 2 resumed into a new engine (the trainer's order: built from the
    // state's parameters, then load_train_state) continues bit for bit.
    auto first = make_gpu_engine(oz, w, L, buckets, &start);
    for (int s = 0; s < 2; ++s) one_step(*first, L, s);
    const TrainState ck = first->train_state();
    REQUIRE(ck.params.size() == L.total);
    CHECK(ck.optimizer_steps == 2);
    auto resumed = make_gpu_engine(oz, w, L, buckets, &ck.params);
    resumed->load_train_state(ck);
    const vitddp_test::Bf16GatherCheck cr = vitddp_test::check_bf16_gather(*resumed, L, ck.params, ck.params);
    CHECK(cr.bf16 == 0);
    CHECK(cr.fp32_read == 0);
    for (int s = 2; s < steps; ++s) {
      INFO("resumed step " << s);
      CHECK(one_step(*resumed, L, s).loss == lz[s]);
    }
    CHECK(resumed->parameters() == zero->parameters());
    const TrainState a = zero->train_state(), b = resumed->train_state();
    CHECK(a.params == b.params);
    REQUIRE(a.optimizer.size() == b.optimizer.size());
    for (size_t k = 0; k < a.optimizer.size(); ++k) CHECK(a.optimizer[k].second == b.optimizer[k].second);
    CHECK(b.optimizer_steps == steps);
  }
}

TEST_CASE("bf16 GpuViT reads only bf16_model_fp32_params from the fp32 buffer: the rest poisoned changes nothing",
          "[gpu][zero]") {
  REQUIRE_GPU();
  ViTConfig cfg = vit_config("vit_micro");
  const ParamLayout L = make_param_layout(cfg);
  const int B = 3;
  std::vector<float> p(L.total, 0.0f);
  init_params(L, InitScheme::Random, 5, p.data());
  std::vector<float> poisoned = p;
  std::vector<char> read(L.total, 0);
  for (const ParamRef& r : bf16_model_fp32_params(L)) std::fill(read.begin() + r.offset, read.begin() + r.offset + r.numel, 1);
  size_t n_poisoned = 0;
  for (const ParamInfo& t : L.params)
    for (size_t i = t.offset; i < t.offset + t.numel; ++i)
      if (!read[i]) {
        poisoned[i] = std::numeric_limits<float>::quiet_NaN();
        ++n_poisoned;
      }
  REQUIRE(n_poisoned > L.total / 2);
  const auto images = vitddp_test::random_images(cfg, B, 7);
  const auto labels = vitddp_test::random_labels(cfg, B, 7);
  vitddp_test::Stream st;
  GpuViTOptions o = GpuViTOptions::for_precision(Precision::bf16);
  o.refresh_bf16_weights = false;  // the bf16 copy comes from the true parameters, as the engine keeps it
  o.gemm_autotune_candidates = 1;
  // Loss and gradients of one forward + backward reading fp32 buffer `fp32`.
  auto run = [&](const std::vector<float>& fp32, std::vector<float>* grads) {
    GpuViT m(L, B, st.s, o);
    vitddp_test::DevVec<float> d_true(p), d_params(fp32), d_grads(L.total), d_img(images), d_loss(1);
    vitddp_test::DevVec<int32_t> d_lab(labels);
    convert_to_bf16(d_true.get(), m.bf16_weights(), L.total, st.s);
    m.forward(d_params.get(), d_img.get(), d_lab.get(), B, d_loss.get());
    m.backward(d_params.get(), d_grads.get(), false, {});
    CUDA_CHECK(cudaStreamSynchronize(st.s));
    *grads = d_grads.download();
    return d_loss.download()[0];
  };
  std::vector<float> g_true, g_poisoned;
  const float l_true = run(p, &g_true), l_poisoned = run(poisoned, &g_poisoned);
  CHECK(std::isfinite(l_true));
  CHECK(std::memcmp(&l_true, &l_poisoned, sizeof(float)) == 0);
  REQUIRE(g_true.size() == g_poisoned.size());
  size_t differ = 0, nonzero = 0;  // over the parameters (the padding's gradients are not written)
  for (const ParamInfo& t : L.params)
    for (size_t i = t.offset; i < t.offset + t.numel; ++i) {
      differ += std::memcmp(&g_true[i], &g_poisoned[i], sizeof(float)) != 0;
      nonzero += g_true[i] != 0.0f;
    }
  CHECK(differ == 0);
  CHECK(nonzero > n_poisoned / 2);
}
