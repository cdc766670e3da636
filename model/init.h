// Parameter initialisation into a host flat buffer.
#pragma once
#include <cstdint>
#include <string>

#include "model/param_layout.h"

namespace vitddp {

/// How parameters are drawn.
///  - Torchvision: torchvision.models.vision_transformer's init: class_token 0; conv_proj.weight
///    truncated normal (std sqrt(1/fan_in), cut at +-2 std), bias 0; pos_embedding N(0, 0.02);
///    LayerNorm weight 1, bias 0; in_proj_weight Xavier-uniform, in/out-proj biases 0;
///    out_proj.weight Kaiming-uniform(a=sqrt(5)) = U(+-1/sqrt(fan_in)); MLP weights Xavier-uniform,
///    biases N(0, 1e-6); head weight and bias 0 (torchvision zeroes the head).
///  - Random: every tensor random and O(1)-scaled (LayerNorm weights 1 + N(0, 0.1), biases
///    N(0, 0.1), weights N(0, 1/fan_in)), so that tests see non-trivial gradients everywhere.
enum class InitScheme { Torchvision, Random };

/// Fills host buffer `params` (layout.total floats; padding set to 0) deterministically from
/// `seed`, using the host's threads. Same seed -> same bits on every rank and machine.
template <typename T>
void init_params(const ParamLayout& layout, InitScheme scheme, uint64_t seed, T* params);

/// Parses "torchvision" or "random"; throws std::invalid_argument naming the value otherwise.
InitScheme parse_init_scheme(const std::string& s);

}  // namespace vitddp
