// The training step replayed from a CUDA graph (--cuda-graph on, the default) against the same
// step launched eagerly (--cuda-graph off): same kernels, same order, so the same losses and
// parameters to the last bit, in every precision. GEMM algorithms are chosen without autotuning
// (a checkpointed run's deterministic choice), so both engines use the same ones. The
// gradient-ready events of --record-grad-ready in both modes: timed on every replay.
#include <cstdio>
#include <string>
#include <vector>

#include "model/grad_ready.h"
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

namespace {

/// Five steps replayed from a graph (`og`) against the same five launched eagerly (`oe`): equal
/// losses and parameters, and the steps did train.
void check_graph_equals_eager(const Options& og, const Options& oe) {
  const ParamLayout L = make_param_layout(vit_config(og.model));
  auto graph = make_gpu_engine(og, World{}, L, {}, nullptr);
  auto eager = make_gpu_engine(oe, World{}, L, {}, nullptr);
  const auto lg = five_steps(*graph, og, L), le = five_steps(*eager, oe, L);
  CHECK(lg == le);
  CHECK(graph->train_state().params == eager->train_state().params);
  CHECK(lg.back() != lg.front());  // the steps did train
}

}  // namespace

TEST_CASE("GPU engine: CUDA graph replay equals eager launches bitwise (losses and parameters)", "[gpu][graph]") {
  for (const std::string p : {"fp32", "tf32", "bf16"}) {
    INFO(p);
    check_graph_equals_eager(graph_options(p, true), graph_options(p, false));
  }
  // The attention as batched cuBLAS GEMMs (auto's choice beyond 64 tokens in fp32 and tf32; forced
  // here on vit_tiny): captured pointer-array kernels and cuBLAS calls replay bit for bit too.
  for (const std::string p : {"fp32", "tf32"})
    for (const AttentionChoice a : {AttentionChoice::Gemm, AttentionChoice::GemmRecompute}) {
      INFO(p << ", --attention " << to_string(a));
      Options og = graph_options(p, true), oe = graph_options(p, false);
      og.attention = oe.attention = a;
      check_graph_equals_eager(og, oe);
    }
}

TEST_CASE("GPU engine: --record-grad-ready times each group inside backward, eager and replayed; training unchanged",
          "[gpu][graph][grad_ready]") {
  for (const bool graph : {true, false}) {
    INFO("cuda graph " << graph);
    Options o = graph_options("bf16", graph), plain = o;
    o.record_grad_ready = true;
    const ParamLayout L = make_param_layout(vit_config(o.model));
    const size_t groups = grad_ready_groups(L).size();
    auto timed = make_gpu_engine(o, World{}, L, {}, nullptr);
    auto untimed = make_gpu_engine(plain, World{}, L, {}, nullptr);
    std::vector<double> losses, first_group;
    for (int i = 0; i < 5; ++i) {  // step 0 eager; with the graph, step 1 captures, 2-4 replay
      INFO("step " << i);
      const auto images = vitddp_test::random_images(L.cfg, o.batch_size, 70 + i);
      const auto labels = vitddp_test::random_labels(L.cfg, o.batch_size, 70 + i);
      timed->stage(HostBatch{images.data(), labels.data(), o.batch_size});
      timed->run_micro_step(0, 1);
      StepRecord r;
      timed->finish_step(&r);
      losses.push_back(r.loss);
      REQUIRE(r.grad_ready_ms.size() == groups);
      // Backward starts where forward ends; the events follow one another on the compute stream
      // (a stale event of an earlier step would lie before this step's start: negative).
      const double start = r.input_wait_ms + r.forward_ms;
      CHECK(r.grad_ready_ms.front() >= start);
      CHECK(r.grad_ready_ms.back() <= r.backward_end_ms);
      for (size_t g = 1; g < groups; ++g) CHECK(r.grad_ready_ms[g] >= r.grad_ready_ms[g - 1]);
      CHECK(r.grad_ready_ms.back() > r.grad_ready_ms.front());
      first_group.push_back(r.grad_ready_ms.front());
    }
    CHECK(losses == five_steps(*untimed, plain, L));  // the events change no result
    CHECK(timed->train_state().params == untimed->train_state().params);
    std::printf("--record-grad-ready (graph %s): first group %.3f ms after the step start (step 4), backward "
                "groups %zu\n", graph ? "on" : "off", first_group.back(), groups);
  }
}
