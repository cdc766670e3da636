#include "src/optimizer.h"

#include <stdexcept>

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

void optimizer_step_host(const OptimizerSpec& spec, double lr, double grad_scale, float* params, const float* grads,
                         std::vector<float*> state, size_t n, int64_t applied_steps) {
  if (state.size() != optimizer_state_names(spec).size())
    throw std::invalid_argument("optimizer_step_host: " + std::to_string(state.size()) + " state buffers, expected " +
                                std::to_string(optimizer_state_names(spec).size()));
  if (spec.kind == OptimizerKind::AdamW) {
    AdamWConfig c = spec.adamw;
    c.lr = lr;
    c.grad_scale = grad_scale;
    adamw_step_host(params, grads, state[0], state[1], n, c, applied_steps + 1);
  } else {
    SgdConfig c = spec.sgd;
    c.lr = lr;
    c.grad_scale = grad_scale;
    sgd_step_host(params, grads, state.empty() ? nullptr : state[0], n, c, applied_steps == 0);
  }
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
