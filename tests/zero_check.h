// The ZeRO-1 (--shard-optimizer) engine checks shared by the CPU (mpi), GPU (gpu, gpu_mpi) tests:
// the command line of a small sharded or DDP run, a driver feeding several engines the same
// batches, the largest difference of two parameter vectors (the World: node_world of
// tests/mpi_test_util.h), and the check of the bf16 all-gather's model copies. CUDA-free.
#pragma once
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "model/param_layout.h"
#include "mpi/hooks/half_host.h"

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

/// Elements where ZeRO-1's bf16 all-gather (--allgather-dtype bf16) breaks its semantics on this
/// rank: all zero when it holds.
struct Bf16GatherCheck {
  size_t bf16 = 0;       ///< model bf16 copy != bf16(master) (round to nearest even), any element of the flat buffer
  size_t fp32_read = 0;  ///< fp32-read parameter (bf16_model_fp32_params) != float(bf16(master)), bit for bit
  size_t untouched = 0;  ///< another parameter's fp32 entry != its start-up value (the model never reads it)
  size_t fp32_read_elements = 0;  ///< elements of the fp32-read parameters (not vacuous)
};

/// Compares engine `e`'s model copies (EngineDiagnostics::model_parameters) with the full fp32
/// `masters` (layout.total: the gathered parameters()) through the host casts of
/// mpi/hooks/half_host.h (bit-exact twins of __float2bfloat16_rn and __bfloat162float), and the
/// fp32 entries of the other parameters with `start` (the parameters the engine was built or
/// loaded with). Padding elements count only in `bf16`.
inline Bf16GatherCheck check_bf16_gather(vitddp::Engine& e, const vitddp::ParamLayout& L,
                                         const std::vector<float>& masters, const std::vector<float>& start) {
  using namespace vitddp;
  std::vector<float> f32;
  std::vector<uint16_t> b16;
  e.diagnostics().model_parameters(&f32, &b16);
  REQUIRE(f32.size() == L.total);
  REQUIRE(b16.size() == L.total);
  REQUIRE(masters.size() == L.total);
  REQUIRE(start.size() == L.total);
  std::vector<int> kind(L.total, 0);  // 0 padding, 1 fp32-read parameter, 2 other parameter
  for (const ParamInfo& p : L.params) std::fill(kind.begin() + p.offset, kind.begin() + p.offset + p.numel, 2);
  for (const ParamRef& r : bf16_model_fp32_params(L)) std::fill(kind.begin() + r.offset, kind.begin() + r.offset + r.numel, 1);
  const auto bits = [](float x) {
    uint32_t u;
    std::memcpy(&u, &x, sizeof(u));
    return u;
  };
  Bf16GatherCheck c;
  for (size_t i = 0; i < L.total; ++i) {
    const uint16_t want = float_to_bf16(masters[i]);
    if (b16[i] != want) ++c.bf16;
    if (kind[i] == 1) {
      ++c.fp32_read_elements;
      if (bits(f32[i]) != bits(bf16_to_float(want))) ++c.fp32_read;
    } else if (kind[i] == 2 && bits(f32[i]) != bits(start[i])) {
      ++c.untouched;
    }
  }
  return c;
}

}  // namespace vitddp_test
