// ZeRO stage 1 (--shard-optimizer) on one GPU equals --no-ddp bit for bit: the shard is the whole
// model, the in-place reduce-scatter and all-gather of one rank leave the buffers as they are, the
// optimizer runs the same element-wise kernels bucket by bucket, and the next forward waits for
// each bucket's all-gather event (inside the CUDA graph too). GEMM algorithms are chosen without
// autotuning, so both engines use the same ones. The sharded engine needs an NCCL communicator,
// hence MPI: ctest runs these under `mpirun -np 1` (gpu_tests_zero_np1); the hidden tag keeps them
// out of the plain gpu_tests run.
#include <string>
#include <vector>

#include "mpi/world/world.h"
#include "src/engines/engine.h"
#include "tests/catch.h"
#include "tests/gpu/gpu_test_util.h"
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
