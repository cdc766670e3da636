// The training step replayed from a CUDA graph (--cuda-graph on, the default) against the same
// step launched eagerly (--cuda-graph off): same kernels, same order, so the same losses and
// parameters to the last bit, in every precision. GEMM algorithms are chosen without autotuning
// (a checkpointed run's deterministic choice), so both engines use the same ones.
#include <string>
#include <vector>

#include "src/engines/engine.h"
#include "tests/catch.h"
#include "tests/test_util.h"

using namespace vitddp;

namespace {

/// vit_tiny, batch 4, SGD with momentum, 5 steps, checkpointing on (no GEMM autotuning).
Options graph_options(const std::string& precision, bool graph) {
  Options o = vitddp_test::engine_test_options("vit_tiny", 4, 5);
  o.lr = 0.05;
  o.momentum = 0.9;
  o.precision = parse_precision(precision);
  o.cuda_graph = graph;
  o.checkpoint_every = 5;
  return o;
}

/// Five steps of random batches (seed 70 + i); returns the losses and leaves the engine's state.
std::vector<double> five_steps(Engine& e, const Options& o, const ParamLayout& L) {
  std::vector<double> losses;
  for (int i = 0; i < 5; ++i) {
    const auto images = vitddp_test::random_images(L.cfg, o.batch_size, 70 + i);
    const auto labels = vitddp_test::random_labels(L.cfg, o.batch_size, 70 + i);
    e.stage(HostBatch{images.data(), labels.data(), o.batch_size});
    e.run_micro_step(0, 1);
    StepRecord r;
    e.finish_step(&r);
    losses.push_back(r.loss);
  }
  return losses;
}

}  // namespace

TEST_CASE("GPU engine: CUDA graph replay equals eager launches bitwise (losses and parameters)", "[gpu][graph]") {
  for (const std::string p : {"fp32", "tf32", "bf16"}) {
    INFO(p);
    const Options og = graph_options(p, true), oe = graph_options(p, false);
    const ParamLayout L = make_param_layout(vit_config(og.model));
    auto graph = make_gpu_engine(og, World{}, L, {}, nullptr);
    auto eager = make_gpu_engine(oe, World{}, L, {}, nullptr);
    const auto lg = five_steps(*graph, og, L), le = five_steps(*eager, oe, L);
    CHECK(lg == le);
    CHECK(graph->train_state().params == eager->train_state().params);
    CHECK(lg.back() != lg.front());  // the steps did train
  }
}
