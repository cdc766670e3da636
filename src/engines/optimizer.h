// The optimizer and learning-rate schedule of a run, resolved from the command line once and
// shared by both engines, the trainer and the checkpoint files.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/adamw.h"
#include "model/lr_schedule.h"
#include "model/sgd.h"
#include "src/app/options.h"
#include "src/engines/train_state.h"

namespace vitddp {

// OptimizerKind (--optimizer) is defined in src/app/option_enums.h.

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

/// One run of elements an optimizer updates: parameter params[param_offset + i] from gradient
/// grads[grad_offset + i] with state element state[state_offset + i], for i < count (offsets and
/// count in elements). DDP updates one segment, the whole flat buffer ({0, 0, 0, total}); ZeRO-1
/// (--shard-optimizer) one per bucket, this rank's chunk of the flat gradient buffer with its slot
/// of the compact state, and the chunk of the flat parameter buffer (fp32 all-gather: param_offset
/// = grad_offset) or the slot of the compact fp32 master shard (bf16 all-gather: param_offset =
/// state_offset); see zero_segments, src/engines/zero_state.h. The GPU optimizer's bf16 copy of the
/// updated parameters is written at the flat offset, grad_offset.
struct OptimizerSegment {
  size_t param_offset = 0;
  size_t grad_offset = 0;
  size_t state_offset = 0;
  size_t count = 0;
};

/// Throws std::invalid_argument, naming `who`, unless every segment's state range
/// [state_offset, state_offset + count) lies within `state_numel` elements.
void check_segments(const std::vector<OptimizerSegment>& segments, size_t state_numel, const char* who);

/// The optimizer of one replica over segments of its flat fp32 parameter and gradient buffers
/// (bound at construction on the host, by bind() on the GPU) and its per-element state, one buffer
/// of state_numel() floats per optimizer_state_names(spec()), zero before the first update
/// (PyTorch's initial AdamW moments; for SGD's momentum buffer, so that a skipped first step
/// changes nothing). The update is element-wise, so updating segments one by one does per element
/// exactly what one pass over the whole buffer does. Semantics: torch.optim.SGD (model/sgd.h) and
/// torch.optim.AdamW (model/adamw.h). Built by one factory per backend: make_host_optimizer (host
/// buffers, sgd_step_host / adamw_step_host) and make_gpu_optimizer (src/engines/optimizer_gpu.h:
/// device buffers, the kernels of cuda/kernels/sgd.h and cuda/kernels/adamw.h, one launch per
/// segment). Used from the training thread only.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  /// Update number applied_steps() + 1 of every segment: params -= f(grads * grad_scale) with learning rate `lr`
  /// (AdamW's step number is applied_steps() + 1; SGD's first update, which initialises the
  /// momentum buffer, is the one with applied_steps() == 0). Host: done on return. GPU: enqueued
  /// on the engine's compute stream, and skipped on the device when its skip flag is set.
  virtual void step(double lr, double grad_scale) = 0;
  /// Records the outcome of the last step() once it is known: `applied` false when the update
  /// was skipped (non-finite gradients), which is not counted (AdamW's step number stays, as
  /// PyTorch's GradScaler skipping optimizer.step()).
  void end_step(bool applied) {
    if (applied) ++applied_steps_;
  }
  /// Updates applied so far (TrainState::optimizer_steps).
  int64_t applied_steps() const { return applied_steps_; }
  const OptimizerSpec& spec() const { return spec_; }
  /// optimizer_state_names(spec()).
  const std::vector<std::string>& state_names() const { return names_; }
  /// Elements of each state buffer (DDP: ParamLayout::total; ZeRO-1: ShardPlan::slot_numel).
  size_t state_numel() const { return state_numel_; }
  /// Host copies of the state buffers, named and ordered as state_names() (TrainState::optimizer).
  /// GPU: waits for the compute stream.
  virtual std::vector<std::pair<std::string, std::vector<float>>> state() const = 0;
  /// Replaces the state buffers and applied_steps() by s.optimizer and s.optimizer_steps; `s`
  /// must have passed check_train_state with spec(). GPU: call with the compute stream idle.
  virtual void load_state(const TrainState& s) = 0;

 protected:
  Optimizer(const OptimizerSpec& spec, size_t state_numel)
      : spec_(spec), names_(optimizer_state_names(spec)), state_numel_(state_numel) {}
  int64_t applied_steps_ = 0;

 private:
  OptimizerSpec spec_;
  std::vector<std::string> names_;
  size_t state_numel_;
};

/// The host optimizer of optimizer_spec(o) over `params` and `grads` (host, n fp32 elements each,
/// kept alive by the caller), state of n elements, one segment {0, 0, 0, n}: SGD through
/// sgd_step_host, AdamW through adamw_step_host, in fp32.
std::unique_ptr<Optimizer> make_host_optimizer(const Options& o, float* params, const float* grads, size_t n);

/// The same over `segments` of `params` and `grads` (host fp32 buffers that hold every segment's
/// parameter and gradient range) with state buffers of `state_numel` elements; one sgd_step_host /
/// adamw_step_host call per segment. Throws std::invalid_argument as check_segments.
std::unique_ptr<Optimizer> make_host_optimizer(const Options& o, float* params, const float* grads, size_t state_numel,
                                               std::vector<OptimizerSegment> segments);

/// Throws std::invalid_argument naming the buffer unless `s` fits an engine of `total` elements
/// with optimizer `spec`: params and every optimizer buffer of `total` floats, the buffer names
/// exactly optimizer_state_names(spec) in order, optimizer_steps >= 0.
void check_train_state(const TrainState& s, const OptimizerSpec& spec, size_t total);

}  // namespace vitddp
