// Debug-only fault injection, through the engine's FaultTarget (src/engines/engine.h):
//  - --debug-fail-at-step N --debug-fail-rank R --debug-fail-mode M: one rank fails inside a step
//    while its peers are inside that step's collectives, to test that every failure ends the whole
//    job promptly (tests/reliability_tests.sh, results/commands/device_reliability2.sh);
//  - --debug-nan-at-step N (src/app/trainer.cpp): rank 0's batch of step N gets a NaN pixel
//    (FaultTarget::poison_staged_batch), for the non-finite skip and stop.
#pragma once
#include <string>

#include "src/engines/engine.h"
#include "src/app/options.h"

namespace vitddp {

// FailMode (--debug-fail-mode) is defined in src/app/option_enums.h.

/// The --debug-fail-* options of a run.
class FaultInjection {
 public:
  /// Reads --debug-fail-at-step/-rank/-mode (validated by parse_options).
  explicit FaultInjection(const Options& o);

  /// "" or the one-line reason why these options cannot work in this job: the rank is not below
  /// `world_size`. (The rules between options, e.g. nccl-abort needs the GPU backend, are
  /// validate_options' in src/app/options.h.)
  static std::string check(const Options& o, int world_size);

  /// True on rank `rank` in step `step` (0-based) when the fault is due there.
  bool due(int step, int rank) const { return step_ >= 0 && step == step_ && rank == rank_; }

  /// Makes rank `rank` fail now, in step `step`: prints one line "[vitddp rank R] error: debug
  /// fault injection ..." to stderr (Throw: the error path prints it) and then throws (Throw),
  /// exits with status 1 (Exit) or calls target.abort_communicator() and returns (NcclAbort).
  void trigger(FaultTarget& target, int rank, int step) const;

 private:
  int step_ = -1;
  int rank_ = 0;
  FailMode mode_ = FailMode::Throw;
};

}  // namespace vitddp
