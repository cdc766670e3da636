#include "src/app/timed_window.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace vitddp {

TimedWindow::TimedWindow(int warmup_steps, int timed_steps, int start_step, std::function<void(bool)> profiler)
    : warmup_(warmup_steps),
      end_(warmup_steps + timed_steps),
      begin_(std::max(warmup_steps, start_step)),
      count_(std::max(0, end_ - begin_)),
      profiler_(std::move(profiler)) {}

const char* TimedWindow::phase(int step) const {
  if (step < warmup_) return "warm-up";
  if (step < end_) return "timed";
  return "cool-down";
}

void TimedWindow::before_step(int step) {
  if (step != begin_ || count_ == 0) return;
  if (profiler_) profiler_(true);
  start_ = Clock::now();
}

void TimedWindow::after_step(int step, const StepRecord& rec) {
  if (step == end_ - 1 && count_ > 0) {
    seconds_ = std::chrono::duration<double>(Clock::now() - start_).count() - excluded_s_;
    if (profiler_) profiler_(false);
  }
  if (!is_timed(step)) return;
  step_ms_.push_back(rec.step_ms);
  for (double start_ms : rec.buckets.start_ms) {
    ++buckets_;
    if (start_ms >= rec.backward_end_ms) ++late_buckets_;
  }
}

void TimedWindow::exclude(int step, double seconds) {
  if (step >= begin_ && step + 1 < end_) excluded_s_ += seconds;
}

double TimedWindow::median_step_ms() const {
  if (step_ms_.empty()) return 0;
  std::vector<double> sorted = step_ms_;
  std::sort(sorted.begin(), sorted.end());
  return sorted[sorted.size() / 2];
}

TimedWindow::Spread TimedWindow::step_time_spread() const {
  Spread s;
  if (step_ms_.empty()) return s;
  std::vector<double> v = step_ms_;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  s.min = v.front();
  s.max = v.back();
  s.median = median_step_ms();
  const double rank = 0.9 * (double)(n - 1);
  const size_t lo = (size_t)std::floor(rank), hi = std::min(lo + 1, n - 1);
  s.p90 = v[lo] + (rank - (double)lo) * (v[hi] - v[lo]);
  double mean = 0, var = 0;
  for (double x : v) mean += x;
  mean /= (double)n;
  for (double x : v) var += (x - mean) * (x - mean);
  var /= (double)n;
  s.cv = mean > 0 ? std::sqrt(var) / mean : 0;
  return s;
}

}  // namespace vitddp
