#include "model/adamw.h"

#include <cmath>
#include <stdexcept>
#include <string>

namespace vitddp {

AdamWScalars adamw_scalars(const AdamWConfig& c, int64_t step) {
  auto bad = [](const std::string& what) { throw std::invalid_argument("AdamW: " + what); };
  if (step < 1) bad("step must be >= 1 (1 for the first update), got " + std::to_string(step));
  if (!(c.lr >= 0)) bad("lr must be >= 0, got " + std::to_string(c.lr));
  if (!(c.eps > 0)) bad("eps must be > 0, got " + std::to_string(c.eps));
  if (!(c.weight_decay >= 0)) bad("weight_decay must be >= 0, got " + std::to_string(c.weight_decay));
  if (!(c.beta1 >= 0 && c.beta1 < 1)) bad("beta1 must be in [0, 1), got " + std::to_string(c.beta1));
  if (!(c.beta2 >= 0 && c.beta2 < 1)) bad("beta2 must be in [0, 1), got " + std::to_string(c.beta2));
  const double t = static_cast<double>(step);
  AdamWScalars s;
  s.decay = 1.0 - c.lr * c.weight_decay;
  s.one_minus_b1 = 1.0 - c.beta1;
  s.beta2 = c.beta2;
  s.one_minus_b2 = 1.0 - c.beta2;
  s.step_size = c.lr / (1.0 - std::pow(c.beta1, t));
  s.bc2_sqrt = std::sqrt(1.0 - std::pow(c.beta2, t));
  s.eps = c.eps;
  s.grad_scale = c.grad_scale;
  return s;
}

template <typename T>
void adamw_step_host(T* p, const T* grad, T* m, T* v, size_t n, const AdamWConfig& cfg, int64_t step) {
  const AdamWScalars s = adamw_scalars(cfg, step);
  const T decay = static_cast<T>(s.decay), w1 = static_cast<T>(s.one_minus_b1), b2 = static_cast<T>(s.beta2),
          w2 = static_cast<T>(s.one_minus_b2), step_size = static_cast<T>(s.step_size),
          bc2_sqrt = static_cast<T>(s.bc2_sqrt), eps = static_cast<T>(s.eps), scale = static_cast<T>(s.grad_scale);
  for (size_t i = 0; i < n; ++i) {
    const T g = cfg.grad_scale == 1.0 ? grad[i] : scale * grad[i];
    T pi = p[i] * decay;
    const T mi = m[i] + w1 * (g - m[i]);
    const T vi = v[i] * b2 + w2 * g * g;
    const T denom = std::sqrt(vi) / bc2_sqrt + eps;
    pi -= step_size * (mi / denom);
    m[i] = mi;
    v[i] = vi;
    p[i] = pi;
  }
}

template void adamw_step_host(float*, const float*, float*, float*, size_t, const AdamWConfig&, int64_t);
template void adamw_step_host(double*, const double*, double*, double*, size_t, const AdamWConfig&, int64_t);

}  // namespace vitddp
