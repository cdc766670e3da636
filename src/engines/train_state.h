// What one replica holds beyond its configuration: the state a checkpoint saves and restores.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace vitddp {

/// The parameters and optimizer state of one replica, on the host, in the flat ParamLayout
/// (ParamLayout::total fp32 elements per buffer, padding 0). In DDP every replica holds the same.
struct TrainState {
  std::vector<float> params;
  /// The optimizer's per-element buffers, named as in torch's optimizer state_dict, in the order
  /// of optimizer_state_names (src/engines/optimizer.h): {"momentum_buffer"} (SGD with momentum), {}
  /// (SGD without), {"exp_avg", "exp_avg_sq"} (AdamW).
  std::vector<std::pair<std::string, std::vector<float>>> optimizer;
  /// Optimizer updates applied so far (steps skipped for non-finite gradients not counted):
  /// torch.optim.AdamW's state['step']; for SGD, 0 means the momentum buffer is not initialised.
  int64_t optimizer_steps = 0;
};

}  // namespace vitddp
