// The ZeRO-1 (--shard-optimizer) engine checks shared by the CPU (mpi), GPU (gpu, gpu_mpi) tests:
// the command line of a small sharded or DDP run, a driver feeding several engines the same
// batches, and the largest difference of two parameter vectors (the World: node_world of
// tests/mpi_test_util.h). CUDA-free.
#pragma once
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "src/engines/engine.h"
#include "tests/catch.h"
#include "tests/mpi_test_util.h"
#include "tests/test_util.h"

namespace vitddp_test {

/// The options of the engine tests: `backend` (cpu or gpu), vit_micro, batch 2, random init, tiny
/// buckets (vit_micro's first bucket is one tensor, the others a few), seed 3, then `extra`.
inline vitddp::Options zero_options(const std::string& backend, const std::vector<std::string>& extra) {
  std::vector<std::string> a = {"--backend", backend, "--model", "vit_micro", "--batch-size", "2", "--init", "random",
                                "--first-bucket-mb", "0.00002", "--bucket-cap-mb", "0.0006", "--seed", "3"};
  a.insert(a.end(), extra.begin(), extra.end());
  return parse_args(a);
}

/// Largest |a - b| over two equal-sized vectors (REQUIREd).
inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs((double)a[i] - b[i]));
  return m;
}

/// Runs `steps` optimizer steps of `micro` micro-steps on each of `engines`, one engine after the
/// other (so the collectives of two GPU engines' communicators never run at the same time), all
/// fed the same batches: this rank's own (seeded by step, micro-step and rank), rank 0's first micro-batch of
/// step `poisoned` with a NaN pixel; learning rate 0.02 in the first step, 0.05 after. Returns each
/// engine's record of the last step; `every`, when given, receives each engine's record of every
/// step ((*every)[engine][step]).
inline std::vector<vitddp::StepRecord> run_zero_steps(const std::vector<vitddp::Engine*>& engines,
                                                      const vitddp::ParamLayout& L, int steps, int micro,
                                                      int poisoned = -1,
                                                      std::vector<std::vector<vitddp::StepRecord>>* every = nullptr) {
  using namespace vitddp;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::vector<StepRecord> last(engines.size());
  if (every) every->assign(engines.size(), {});
  for (size_t e = 0; e < engines.size(); ++e)
    for (int s = 0; s < steps; ++s) {
      engines[e]->set_lr(s == 0 ? 0.02 : 0.05);
      for (int k = 0; k < micro; ++k) {
        const uint64_t seed = 1000 + 100 * s + 10 * k + rank;
        const auto images = random_images(L.cfg, 2, seed);
        const auto labels = random_labels(L.cfg, 2, seed);
        engines[e]->stage(HostBatch{images.data(), labels.data(), 2});
        if (s == poisoned && k == 0 && rank == 0) engines[e]->fault_target().poison_staged_batch();
        engines[e]->run_micro_step(k, micro);
        engines[e]->wait_staged_copy();  // the batch's host buffers go out of scope
      }
      engines[e]->finish_step(&last[e]);
      if (every) (*every)[e].push_back(last[e]);
    }
  return last;
}

}  // namespace vitddp_test
