#include "model/sgd.h"

namespace vitddp {

template <typename T>
void sgd_step_host(T* p, const T* grad, T* buf, size_t n, const SgdConfig& c, bool first_step) {
  const T lr = static_cast<T>(c.lr), mom = static_cast<T>(c.momentum), wd = static_cast<T>(c.weight_decay);
  for (size_t i = 0; i < n; ++i) {
    T g = c.grad_scale == 1.0 ? grad[i] : static_cast<T>(c.grad_scale) * grad[i];
    if (c.weight_decay != 0) g += wd * p[i];
    if (c.momentum != 0) {
      buf[i] = first_step ? g : mom * buf[i] + g;
      g = buf[i];
    }
    p[i] -= lr * g;
  }
}

template void sgd_step_host(float*, const float*, float*, size_t, const SgdConfig&, bool);
template void sgd_step_host(double*, const double*, double*, size_t, const SgdConfig&, bool);

}  // namespace vitddp
