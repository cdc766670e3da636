#include "model/init.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <thread>
#include <vector>

#include "model/rng.h"

namespace vitddp {
namespace {

enum class Dist { Zero, One, Normal, TruncNormal, Uniform };

struct Rule {
  Dist dist;
  double a;  // std (Normal, TruncNormal) or bound (Uniform); offset for One (1 + N(0,a))
};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Rule torchvision_rule(const ParamInfo& p, const ViTConfig& c) {
  const std::string& n = p.name;
  const double D = c.hidden;
  if (n == "class_token") return {Dist::Zero, 0};
  if (n == "conv_proj.weight") return {Dist::TruncNormal, std::sqrt(1.0 / c.patch_dim())};
  if (n == "encoder.pos_embedding") return {Dist::Normal, 0.02};
  if (n.find("ln") != std::string::npos && ends_with(n, ".weight")) return {Dist::One, 0};
  if (ends_with(n, "in_proj_weight")) return {Dist::Uniform, std::sqrt(6.0 / (D + 3 * D))};
  if (ends_with(n, "out_proj.weight")) return {Dist::Uniform, 1.0 / std::sqrt(D)};
  if (ends_with(n, "mlp.0.weight") || ends_with(n, "mlp.3.weight"))
    return {Dist::Uniform, std::sqrt(6.0 / (D + c.mlp_dim))};
  if (ends_with(n, "mlp.0.bias") || ends_with(n, "mlp.3.bias")) return {Dist::Normal, 1e-6};
  return {Dist::Zero, 0};  // remaining biases, head weight and bias
}

Rule random_rule(const ParamInfo& p) {
  const std::string& n = p.name;
  if (n.find("ln") != std::string::npos && ends_with(n, ".weight")) return {Dist::One, 0.1};
  if (p.shape.size() == 1) return {Dist::Normal, 0.1};
  if (n == "class_token" || n == "encoder.pos_embedding") return {Dist::Normal, 0.5};
  size_t fan_in = 1;
  for (size_t i = 1; i < p.shape.size(); ++i) fan_in *= static_cast<size_t>(p.shape[i]);
  return {Dist::Normal, 1.0 / std::sqrt(static_cast<double>(fan_in))};
}

double draw(const Rule& r, uint64_t seed, uint64_t stream, uint64_t i) {
  switch (r.dist) {
    case Dist::Zero: return 0.0;
    case Dist::One: return r.a == 0 ? 1.0 : 1.0 + r.a * rand_normal(seed, stream, i);
    case Dist::Normal: return r.a * rand_normal(seed, stream, i);
    case Dist::Uniform: return r.a * (2.0 * rand_uniform(seed, stream, i) - 1.0);
    case Dist::TruncNormal: {
      // Rejection: redraw with a new counter until inside +-2 std (torch.nn.init.trunc_normal_).
      for (uint64_t k = 0;; ++k) {
        const double z = rand_normal(seed, stream, i + (k << 40));
        if (std::fabs(z) <= 2.0) return r.a * z;
      }
    }
  }
  return 0.0;
}

}  // namespace

template <typename T>
void init_params(const ParamLayout& L, InitScheme scheme, uint64_t seed, T* params) {
  std::fill(params, params + L.total, T(0));
  const unsigned nthreads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  for (size_t pi = 0; pi < L.params.size(); ++pi) {
    const ParamInfo& p = L.params[pi];
    const Rule r = scheme == InitScheme::Torchvision ? torchvision_rule(p, L.cfg) : random_rule(p);
    T* dst = params + p.offset;
    auto fill = [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) dst[i] = static_cast<T>(draw(r, seed, pi, i));
    };
    if (p.numel < (1u << 20) || nthreads == 1) {
      fill(0, p.numel);
      continue;
    }
    std::vector<std::thread> pool;
    const size_t chunk = (p.numel + nthreads - 1) / nthreads;
    for (unsigned t = 0; t < nthreads; ++t)
      pool.emplace_back(fill, std::min(p.numel, t * chunk), std::min(p.numel, (t + 1) * chunk));
    for (auto& th : pool) th.join();
  }
}

template void init_params(const ParamLayout&, InitScheme, uint64_t, float*);
template void init_params(const ParamLayout&, InitScheme, uint64_t, double*);

InitScheme parse_init_scheme(const std::string& s) {
  if (s == "torchvision") return InitScheme::Torchvision;
  if (s == "random") return InitScheme::Random;
  throw std::invalid_argument("unknown init scheme '" + s + "' (known: torchvision, random)");
}

}  // namespace vitddp
