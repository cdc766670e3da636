#include "src/engines/optimizer.h"

#include <stdexcept>
#include <string>
#include <utility>

namespace vitddp {

OptimizerKind parse_optimizer(const std::string& name) {
  if (name == "sgd") return OptimizerKind::Sgd;
  if (name == "adamw") return OptimizerKind::AdamW;
  throw std::invalid_argument("unknown optimizer '" + name + "' (expected sgd or adamw)");
}

OptimizerSpec optimizer_spec(const Options& o) {
  OptimizerSpec s;
  s.kind = o.optimizer;
  s.sgd = SgdConfig{o.lr, o.momentum, o.weight_decay};
  s.adamw.lr = o.lr;
  s.adamw.beta1 = o.adam_beta1;
  s.adamw.beta2 = o.adam_beta2;
  s.adamw.eps = o.adam_eps;
  s.adamw.weight_decay = o.weight_decay;
  return s;
}

std::vector<std::string> optimizer_state_names(const OptimizerSpec& spec) {
  if (spec.kind == OptimizerKind::AdamW) return {"exp_avg", "exp_avg_sq"};
  if (spec.sgd.momentum != 0) return {"momentum_buffer"};
  return {};
}

int64_t lr_decay_steps(const Options& o) { return o.lr_decay_steps > 0 ? o.lr_decay_steps : o.total_steps(); }

LrSchedule lr_schedule(const Options& o) {
  LrSchedule s;
  s.kind = o.lr_schedule;
  s.base_lr = o.lr;
  s.warmup_steps = o.lr_warmup_steps;
  s.total_steps = lr_decay_steps(o);
  s.min_lr = o.min_lr;
  return s;
}

namespace {

/// State buffers on the host, zeroed; the update of one segment is the subclass's.
class HostOptimizer : public Optimizer {
 public:
  HostOptimizer(const OptimizerSpec& spec, float* params, const float* grads, size_t state_numel,
                std::vector<OptimizerSegment> segments)
      : Optimizer(spec, state_numel), params_(params), grads_(grads), segments_(std::move(segments)) {
    check_segments(segments_, state_numel, "host optimizer");
    for (const auto& name : state_names()) state_.emplace_back(name, std::vector<float>(state_numel, 0.0f));
  }
  std::vector<std::pair<std::string, std::vector<float>>> state() const override { return state_; }
  void load_state(const TrainState& s) override {
    state_ = s.optimizer;
    applied_steps_ = s.optimizer_steps;
  }

 protected:
  /// State buffer k at segment `s`'s first element.
  float* state_at(size_t k, const OptimizerSegment& s) { return state_[k].second.data() + s.state_offset; }

  float* params_;
  const float* grads_;
  std::vector<OptimizerSegment> segments_;
  std::vector<std::pair<std::string, std::vector<float>>> state_;  // state_names()
};

/// torch.optim.SGD, sgd_step_host (model/sgd.h).
class HostSgd final : public HostOptimizer {
 public:
  using HostOptimizer::HostOptimizer;
  void step(double lr, double grad_scale) override {
    SgdConfig c = spec().sgd;
    c.lr = lr;
    c.grad_scale = grad_scale;
    for (const OptimizerSegment& s : segments_)
      sgd_step_host(params_ + s.param_offset, grads_ + s.grad_offset, state_.empty() ? nullptr : state_at(0, s),
                    s.count, c, applied_steps_ == 0);
  }
};

/// torch.optim.AdamW, adamw_step_host (model/adamw.h).
class HostAdamW final : public HostOptimizer {
 public:
  using HostOptimizer::HostOptimizer;
  void step(double lr, double grad_scale) override {
    AdamWConfig c = spec().adamw;
    c.lr = lr;
    c.grad_scale = grad_scale;
    for (const OptimizerSegment& s : segments_)
      adamw_step_host(params_ + s.param_offset, grads_ + s.grad_offset, state_at(0, s), state_at(1, s), s.count, c,
                      applied_steps_ + 1);
  }
};

}  // namespace

void check_segments(const std::vector<OptimizerSegment>& segments, size_t state_numel, const char* who) {
  for (const OptimizerSegment& s : segments)
    if (s.state_offset > state_numel || s.count > state_numel - s.state_offset)
      throw std::invalid_argument(std::string(who) + ": segment of " + std::to_string(s.count) +
                                  " elements at state offset " + std::to_string(s.state_offset) +
                                  " exceeds the state buffers of " + std::to_string(state_numel) + " elements");
}

std::unique_ptr<Optimizer> make_host_optimizer(const Options& o, float* params, const float* grads, size_t n) {
  return make_host_optimizer(o, params, grads, n, {OptimizerSegment{0, 0, 0, n}});
}

std::unique_ptr<Optimizer> make_host_optimizer(const Options& o, float* params, const float* grads, size_t state_numel,
                                               std::vector<OptimizerSegment> segments) {
  const OptimizerSpec spec = optimizer_spec(o);
  if (spec.kind == OptimizerKind::AdamW)
    return std::make_unique<HostAdamW>(spec, params, grads, state_numel, std::move(segments));
  return std::make_unique<HostSgd>(spec, params, grads, state_numel, std::move(segments));
}

void check_train_state(const TrainState& s, const OptimizerSpec& spec, size_t total) {
  auto bad = [](const std::string& what) { throw std::invalid_argument("training state: " + what); };
  if (s.params.size() != total)
    bad("params hold " + std::to_string(s.params.size()) + " elements, expected " + std::to_string(total));
  const std::vector<std::string> names = optimizer_state_names(spec);
  std::string want, got;
  for (const auto& n : names) want += (want.empty() ? "" : ", ") + n;
  for (const auto& b : s.optimizer) got += (got.empty() ? "" : ", ") + b.first;
  if (got != want) bad("optimizer buffers {" + got + "}, expected {" + want + "}");
  for (const auto& b : s.optimizer)
    if (b.second.size() != total)
      bad("optimizer buffer " + b.first + " holds " + std::to_string(b.second.size()) + " elements, expected " +
          std::to_string(total));
  if (s.optimizer_steps < 0) bad("optimizer_steps is negative: " + std::to_string(s.optimizer_steps));
}

}  // namespace vitddp
