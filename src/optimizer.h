// The optimizer and learning-rate schedule of a run, resolved from the command line once and
// shared by both engines, the trainer and the checkpoint files.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "model/adamw.h"
#include "model/lr_schedule.h"
#include "model/sgd.h"
#include "src/options.h"
#include "src/train_state.h"

namespace vitddp {

// OptimizerKind (--optimizer) is defined in src/option_enums.h.

/// --optimizer's value: "sgd" or "adamw"; throws std::invalid_argument naming the value otherwise.
OptimizerKind parse_optimizer(const std::string& name);

/// The optimizer of a run. `sgd` is meaningful for kind == Sgd, `adamw` for kind == AdamW; their
/// lr fields hold --lr (the schedule's base value) and grad_scale is 1: the engines replace both
/// at every step (lr from the schedule, grad_scale = 1 / micro-steps).
struct OptimizerSpec {
  OptimizerKind kind = OptimizerKind::Sgd;
  SgdConfig sgd;
  AdamWConfig adamw;
};

/// OptimizerSpec of the options --optimizer, --lr, --momentum, --weight-decay, --adam-beta1,
/// --adam-beta2, --adam-eps (the values were range-checked by parse_options).
OptimizerSpec optimizer_spec(const Options& o);

/// Names of the per-element state buffers the optimizer keeps, as torch's optimizer state_dict
/// calls them, each one fp32 buffer of ParamLayout::total elements in the flat layout:
///   SGD with momentum != 0: {"momentum_buffer"}; SGD without momentum: {};
///   AdamW: {"exp_avg", "exp_avg_sq"}.
std::vector<std::string> optimizer_state_names(const OptimizerSpec& spec);

/// The schedule of --lr-schedule, --lr, --lr-warmup-steps, --min-lr and --lr-decay-steps (0 =
/// the run's total steps, Options::total_steps()). Step i of the schedule is the 0-based index of
/// the optimizer step in the whole training run (warm-up steps of the timing window included;
/// steps skipped for non-finite gradients included, as torch's scheduler.step() is still called
/// when GradScaler skips optimizer.step()). Validated (LrSchedule::validate) by parse_options.
LrSchedule lr_schedule(const Options& o);

/// The resolved length of the schedule: --lr-decay-steps, or the run's total steps when it is 0.
int64_t lr_decay_steps(const Options& o);

/// One optimizer update on host buffers of n fp32 elements: params -= f(grad * grad_scale) with
/// learning rate `lr`. `state` holds one buffer per optimizer_state_names(spec), in that order,
/// each of n elements (zero before the first update). `applied_steps` is the number of updates
/// applied before this one (AdamW's step number is applied_steps + 1; SGD's first update, which
/// initialises the momentum buffer, is applied_steps == 0). Semantics: sgd_step_host /
/// adamw_step_host. Throws std::invalid_argument when `state` has the wrong number of buffers.
void optimizer_step_host(const OptimizerSpec& spec, double lr, double grad_scale, float* params, const float* grads,
                         std::vector<float*> state, size_t n, int64_t applied_steps);

/// Throws std::invalid_argument naming the buffer unless `s` fits an engine of `total` elements
/// with optimizer `spec`: params and every optimizer buffer of `total` floats, the buffer names
/// exactly optimizer_state_names(spec) in order, optimizer_steps >= 0.
void check_train_state(const TrainState& s, const OptimizerSpec& spec, size_t total);

}  // namespace vitddp
