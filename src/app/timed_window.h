// The article's timing window over a run's steps: warm-up, timed steps, cool-down.
#pragma once
#include <chrono>
#include <functional>
#include <vector>

#include "src/engines/engine.h"

namespace vitddp {

/// Steps [0, warmup) are warm-up, [warmup, warmup + steps) the timed window, the rest cool-down
/// (the article: 10 warm-up, 3 timed, 1 cool-down). The window's host wall time runs from just
/// before its first step starts (before that step's learning rate is set and its micro-steps are
/// launched) to just after its last step finished (Engine::finish_step) on this rank, minus the
/// work between steps inside it (checkpoints, evaluations: exclude()). The engine's profiler
/// (cudaProfilerStart/Stop on the GPU backend) brackets exactly that range, so nsys'
/// --capture-range=cudaProfilerApi records the timed steps only: `profiler(true)` / `profiler(false)`
/// (EngineDiagnostics::profiler) are called once each, at the window's start and end. A resumed run (first step
/// `start_step`) times what is left of the window after it: steps [max(warmup, start), warmup + steps).
class TimedWindow {
 public:
  TimedWindow(int warmup_steps, int timed_steps, int start_step, std::function<void(bool)> profiler = {});

  /// True for a step (0-based) of the timed window [warmup, warmup + steps).
  bool is_timed(int step) const { return step >= warmup_ && step < end_; }
  /// "warm-up", "timed" or "cool-down" for a step (0-based).
  const char* phase(int step) const;

  /// Call before step `step` runs: at the window's first step, starts the profiler and the clock.
  void before_step(int step);
  /// Call after step `step` finished with record `rec`: a timed step's device step time and its
  /// buckets are recorded; at the window's last step, the clock and the profiler stop.
  void after_step(int step, const StepRecord& rec);
  /// `seconds` of work between steps after step `step` (checkpoint, evaluation): taken out of the
  /// window when it lies inside it (after a timed step other than the last).
  void exclude(int step, double seconds);

  /// Timed steps this run executes (0 when a resumed run starts past the window).
  int count() const { return count_; }
  /// True when every step of this run's part of the window ran (and there is one).
  bool complete(int steps_done) const { return count_ > 0 && steps_done >= end_; }
  /// Host wall time of the window (s), once complete.
  double seconds() const { return seconds_; }
  /// Median device step time (StepRecord::step_ms) of the timed steps, ms (the upper median for
  /// an even count); 0 when none ran.
  double median_step_ms() const;
  /// The spread of the timed steps' device step times (StepRecord::step_ms), ms; all 0 when none
  /// ran. p90: the linear-interpolation percentile (numpy.percentile's default: rank
  /// 0.9 x (n-1) in the sorted times, interpolated between its neighbours); cv: population
  /// standard deviation / mean (numpy.std's default ddof=0), dimensionless.
  struct Spread {
    double min = 0, median = 0, p90 = 0, max = 0, cv = 0;
  };
  Spread step_time_spread() const;
  /// Bucket all-reduces of the timed steps, and those that started at or after backward compute
  /// ended (BucketTimes::start_ms >= StepRecord::backward_end_ms): not overlapped with backward.
  int buckets() const { return buckets_; }
  int late_buckets() const { return late_buckets_; }

 private:
  using Clock = std::chrono::steady_clock;
  int warmup_, end_, begin_, count_;
  std::function<void(bool)> profiler_;
  Clock::time_point start_;
  double excluded_s_ = 0, seconds_ = 0;
  std::vector<double> step_ms_;
  int buckets_ = 0, late_buckets_ = 0;
};

}  // namespace vitddp
