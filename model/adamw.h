// AdamW (Loshchilov & Hutter, "Decoupled Weight Decay Regularization", ICLR 2019), exactly as
// torch.optim.AdamW: host reference and the scalar coefficients shared with the GPU kernel.
#pragma once
#include <cstddef>
#include <cstdint>

namespace vitddp {

/// Hyper-parameters of torch.optim.AdamW (amsgrad, maximize, capturable off). Defaults are
/// PyTorch's: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 1e-2.
struct AdamWConfig {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
  /// Multiplies the gradient before anything else (1/k for k accumulated micro-batches), as
  /// SgdConfig::grad_scale; 1 is PyTorch's behaviour.
  double grad_scale = 1.0;
};

/// The per-step scalars of one AdamW update, computed in double precision as PyTorch does on the
/// host (torch/optim/adamw.py + adam.py, _single_tensor_adam with decoupled weight decay:
/// Python floats; the tensor kernels receive them as scalars).
struct AdamWScalars {
  double decay;         ///< 1 - lr * weight_decay: the parameter is multiplied by it first
  double one_minus_b1;  ///< 1 - beta1: the lerp weight of exp_avg towards the gradient
  double beta2;         ///< exp_avg_sq decay
  double one_minus_b2;  ///< 1 - beta2
  double step_size;     ///< lr / (1 - beta1^step)
  double bc2_sqrt;      ///< sqrt(1 - beta2^step)
  double eps;
  double grad_scale;
};

/// Scalars of update number `step` (1-based: PyTorch's state['step'] after its increment, i.e. 1
/// for the first update). Throws std::invalid_argument when step < 1, lr < 0, eps <= 0,
/// weight_decay < 0 or a beta is outside [0, 1) (PyTorch's own checks, plus step).
AdamWScalars adamw_scalars(const AdamWConfig& cfg, int64_t step);

/// One AdamW update of n elements, torch.optim.AdamW semantics (PyTorch 2.x torch/optim/adam.py,
/// _single_tensor_adam with decoupled_weight_decay=True, which torch.optim.AdamW is), with
/// g = grad_scale * grad and t = step:
///   p     = p * (1 - lr * weight_decay)                 # decoupled decay: p -= lr * wd * p
///   m     = lerp(m, g, 1 - beta1)   = m + (1 - beta1) * (g - m)
///   v     = v * beta2 + (1 - beta2) * g * g
///   denom = sqrt(v) / sqrt(1 - beta2^t) + eps
///   p     = p - (lr / (1 - beta1^t)) * m / denom
/// Element-wise arithmetic in T (PyTorch: the parameter dtype), scalars from adamw_scalars in
/// double rounded to T. `exp_avg` (m) and `exp_avg_sq` (v) must be zero before step 1 (PyTorch's
/// zero-initialised state). All buffers hold n elements. Host reference for cuda/kernels/adamw.h.
template <typename T>
void adamw_step_host(T* params, const T* grads, T* exp_avg, T* exp_avg_sq, size_t n, const AdamWConfig& cfg,
                     int64_t step);

}  // namespace vitddp
