// SGD with momentum and weight decay, exactly as torch.optim.SGD (dampening 0, nesterov off).
#pragma once
#include <cstddef>

namespace vitddp {

/// Hyper-parameters of torch.optim.SGD. Defaults: lr 1e-3 (this program's choice, PyTorch
/// requires one), momentum 0, weight_decay 0.
struct SgdConfig {
  double lr = 1e-3;
  double momentum = 0.0;
  double weight_decay = 0.0;
  /// Multiplies the gradient before anything else: 1/k for k accumulated micro-batches, so that
  /// k micro-steps of batch b take the same step as one step of batch k*b.
  double grad_scale = 1.0;
};

/// One step on n elements, torch.optim.SGD semantics (torch/optim/sgd.py, _single_tensor_sgd):
///   g = grad_scale * grad + weight_decay * p
///   if momentum != 0: buf = g on the first step, else buf = momentum * buf + g; g = buf
///   p -= lr * g
/// `momentum_buf` may be null when momentum == 0. Host reference for the GPU kernel.
template <typename T>
void sgd_step_host(T* params, const T* grads, T* momentum_buf, size_t n, const SgdConfig& cfg,
                   bool first_step);

}  // namespace vitddp
