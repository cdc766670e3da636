// Learning-rate schedules: constant, and linear warm-up followed by cosine decay.
#pragma once
#include <cstdint>
#include <string>

namespace vitddp {

enum class LrScheduleKind {
  Constant,      ///< linear warm-up from 0 (if warmup_steps > 0), then lr(step) = base_lr
  WarmupCosine,  ///< linear warm-up from 0, then half a cosine down to min_lr
};

/// A learning-rate schedule over optimizer steps. `step` is the 0-based index of the optimizer
/// update (the first optimizer.step() is step 0), as with a torch LambdaLR stepped after each
/// optimizer.step(). Units: lr values in the optimizer's units; steps are optimizer updates (not
/// micro-batches).
///
/// Constant (transformers.get_constant_schedule_with_warmup; torch LambdaLR with
/// lambda s: min(1, s / warmup_steps)):
///   step < warmup_steps:  lr = base_lr * step / warmup_steps            (0 at step 0)
///   otherwise:            lr = base_lr
/// (total_steps and min_lr are not used).
///
/// WarmupCosine (transformers.get_cosine_schedule_with_warmup with num_cycles = 0.5, and its
/// min-lr variant get_cosine_with_min_lr_schedule_with_warmup; timm CosineLRScheduler with
/// warmup_lr_init = 0, t_initial = total_steps - warmup_steps, lr_min = min_lr):
///   step < warmup_steps:  lr = base_lr * step / warmup_steps            (0 at step 0)
///   otherwise:            progress = min(1, (step - warmup_steps) / (total_steps - warmup_steps))
///                         lr = min_lr + (base_lr - min_lr) * 0.5 * (1 + cos(pi * progress))
/// so lr = base_lr at the end of warm-up, min_lr at step >= total_steps (and after it).
struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::Constant;
  double base_lr = 1e-3;
  int64_t warmup_steps = 0;  ///< linear warm-up steps (both kinds); 0 = no warm-up
  int64_t total_steps = 0;   ///< WarmupCosine only: steps until min_lr, > warmup_steps
  double min_lr = 0.0;       ///< WarmupCosine only: floor, 0 <= min_lr <= base_lr

  /// Learning rate of optimizer step `step` (>= 0). Throws std::invalid_argument for step < 0 or
  /// an invalid schedule (see validate()).
  double lr_at(int64_t step) const;

  /// Throws std::invalid_argument naming the field when: base_lr < 0 (or not finite),
  /// warmup_steps < 0; for WarmupCosine also total_steps <= warmup_steps or min_lr outside
  /// [0, base_lr].
  void validate() const;
};

/// Parses "constant" or "cosine" (warm-up + cosine); throws std::invalid_argument naming the value
/// otherwise.
LrScheduleKind parse_lr_schedule(const std::string& s);

/// "constant" or "cosine" (the inverse of parse_lr_schedule).
std::string lr_schedule_name(LrScheduleKind kind);

}  // namespace vitddp
