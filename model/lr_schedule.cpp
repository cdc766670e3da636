#include "model/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace vitddp {

void LrSchedule::validate() const {
  auto bad = [](const std::string& what) { throw std::invalid_argument("learning-rate schedule: " + what); };
  if (!(base_lr >= 0) || !std::isfinite(base_lr)) bad("base_lr must be a finite value >= 0, got " + std::to_string(base_lr));
  if (warmup_steps < 0) bad("warmup_steps must be >= 0, got " + std::to_string(warmup_steps));
  if (kind != LrScheduleKind::WarmupCosine) return;
  if (total_steps <= warmup_steps)
    bad("total_steps (" + std::to_string(total_steps) + ") must be greater than warmup_steps (" +
        std::to_string(warmup_steps) + ")");
  if (!(min_lr >= 0 && min_lr <= base_lr))
    bad("min_lr must be in [0, base_lr = " + std::to_string(base_lr) + "], got " + std::to_string(min_lr));
}

double LrSchedule::lr_at(int64_t step) const {
  validate();
  if (step < 0) throw std::invalid_argument("learning-rate schedule: step must be >= 0, got " + std::to_string(step));
  if (step < warmup_steps) return base_lr * static_cast<double>(step) / static_cast<double>(warmup_steps);
  if (kind == LrScheduleKind::Constant) return base_lr;
  const double progress =
      std::min(1.0, static_cast<double>(step - warmup_steps) / static_cast<double>(total_steps - warmup_steps));
  const double pi = 3.14159265358979323846;
  return min_lr + (base_lr - min_lr) * 0.5 * (1.0 + std::cos(pi * progress));
}

LrScheduleKind parse_lr_schedule(const std::string& s) {
  if (s == "constant") return LrScheduleKind::Constant;
  if (s == "cosine") return LrScheduleKind::WarmupCosine;
  throw std::invalid_argument("unknown learning-rate schedule '" + s + "' (expected constant or cosine)");
}

std::string lr_schedule_name(LrScheduleKind kind) {
  return kind == LrScheduleKind::Constant ? "constant" : "cosine";
}

}  // namespace vitddp
