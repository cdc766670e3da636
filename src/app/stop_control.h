// When a training run stops before its last step, and with which exit code.
#pragma once
#include <functional>
#include <string>

#include "mpi/world/world.h"
#include "src/app/run_guard.h"

namespace vitddp {

/// The stop decision of a run, the same on every rank. It owns the run's RunGuard:
///  - watchdog: heartbeat() after every step and around the work between steps; no heartbeat for
///    --step-timeout seconds, or an error from `poll`, ends the process with exit code 3
///    (RunGuard);
///  - signal: SIGTERM/SIGINT on any rank stops every rank after the step: exit 128 + signal;
///  - NaN/Inf: a step whose loss or averaged gradients held NaN/Inf on any rank (its update was
///    not applied) stops every rank with exit 4 under --on-nonfinite stop, or is counted and the
///    run goes on under skip;
///  - checkpoint failure (Checkpointer::write, already agreed): exit 1.
/// The first stop wins: the loop ends after it. stop_reason() is the results file's `stop_reason`
/// ("completed" while none happened); messages go to stderr on rank 0.
class StopControl {
 public:
  /// What every rank agreed on after a step (agree()).
  struct Verdict {
    int signal = 0;          ///< the highest signal number any rank received, or 0
    bool nonfinite = false;  ///< some rank's step was non-finite
  };

  /// `step_timeout_s` and `poll` as RunGuard's; `stop_on_nonfinite`: --on-nonfinite stop.
  StopControl(const World& w, double step_timeout_s, std::function<std::string()> poll, bool stop_on_nonfinite);

  /// Restarts the watchdog's clock (RunGuard::step_done): step `step` (0-based) completed, or work
  /// between steps begins or ends (each gets its own --step-timeout).
  void heartbeat(int step) { guard_.step_done(step); }

  /// Collective, once per step: one MPI_Allreduce (MAX) of this rank's received signal and
  /// `local_nonfinite`. Counts a non-finite step.
  Verdict agree(bool local_nonfinite);

  /// Whether the step with verdict `v` stops the run as non-finite (then no checkpoint follows it).
  bool nonfinite_stops(const Verdict& v) const { return v.nonfinite && stop_on_nonfinite_; }

  /// After the step's checkpoint: applies the verdict of step `step` (0-based, as the results
  /// file and --debug-nan-at-step) - prints the non-finite line (every non-finite step), then
  /// stops on NaN/Inf (policy stop) or on a signal. True when the run stops.
  bool stops_after(int step, const Verdict& v);
  /// A checkpoint after step `step` (0-based) failed with `error` (on every rank): prints it, stops (exit 1).
  void checkpoint_failed(int step, const std::string& error);

  bool stopped() const { return exit_code_ != 0; }
  const std::string& stop_reason() const { return reason_; }
  /// 0 (completed), 1 (checkpoint failed), 4 (non-finite stop) or 128 + signal.
  int exit_code() const { return exit_code_; }
  /// Steps that were non-finite on some rank.
  int nonfinite_steps() const { return nonfinite_steps_; }

 private:
  void stop(std::string reason, int exit_code);

  World world_;
  RunGuard guard_;
  bool stop_on_nonfinite_;
  int nonfinite_steps_ = 0, exit_code_ = 0;
  std::string reason_ = "completed";
};

}  // namespace vitddp
