// CPU reference ViT forward/backward: clear loops, double-precision accumulation.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/grad_ready.h"
#include "model/param_layout.h"

namespace vitddp {

/// Reference implementation of torchvision's VisionTransformer (dropout 0) with a mean
/// cross-entropy loss (torch.nn.CrossEntropyLoss, reduction='mean'). The oracle for tests and the
/// compute of the CPU backend. T is the storage type of parameters and gradients (float or
/// double); every sum is accumulated in double.
///
/// Shapes: images [batch, C, H, W] float32 NCHW, labels [batch] int32 in [0, num_classes),
/// params/grads flat buffers of layout.total elements (see ParamLayout).
template <typename T>
class CpuViT {
 public:
  /// Sizes buffers for up to `max_batch` images.
  CpuViT(const ParamLayout& layout, int max_batch);
  ~CpuViT();
  CpuViT(const CpuViT&) = delete;
  CpuViT& operator=(const CpuViT&) = delete;

  /// Runs the forward pass and the loss; keeps the activations for backward().
  /// Returns the mean cross-entropy. Throws std::invalid_argument if batch > max_batch or a
  /// label is out of range.
  double forward(const T* params, const float* images, const int32_t* labels, int batch);

  /// Backward of the last forward(): writes (accumulate=false) or adds (accumulate=true)
  /// dLoss/dparams into `grads`, reporting finished groups to `on_ready` (may be empty) in the
  /// order documented in grad_ready.h.
  void backward(const T* params, T* grads, bool accumulate, const GradReadyFn& on_ready = {});

  /// Logits of the last forward, [batch, num_classes], row-major.
  const std::vector<double>& logits() const;

  /// Bytes of the model's numeric buffers (capacity x element size of every vector: the double
  /// copy and transposes of the parameters, the activations saved for max_batch, the backward
  /// buffers), as allocated by the constructor; small bookkeeping (tensor pointer tables, the
  /// per-block vectors of buffers) not counted. Mirrored by cpu_vit_memory() in src/engines/memory_estimate.h.
  size_t allocated_bytes() const;

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace vitddp
