// Helpers shared by the Catch2 tests of every binary (cpu, mpi, gpu, gpu_mpi): error norms,
// temporary directories, exception messages, option parsing, random ViT inputs and parameters,
// the documented gradient-ready groups.
#pragma once
#include <stdlib.h>  // mkdtemp

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "model/init.h"
#include "model/param_layout.h"
#include "model/rng.h"
#include "model/vit_config.h"
#include "src/app/options.h"
#include "tests/catch.h"

namespace vitddp_test {

/// ||a - b|| / ||b|| over the first n entries (b is the reference), summed in double; 0 when both
/// are zero, infinity when only b is.
template <typename A, typename B>
double norm_rel_err(const A* a, const B* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    num += d * d;
    den += static_cast<double>(b[i]) * static_cast<double>(b[i]);
  }
  if (den == 0) return num == 0 ? 0.0 : INFINITY;
  return std::sqrt(num / den);
}

/// norm_rel_err over two whole vectors of the same size (REQUIREd); b is the reference.
template <typename A, typename B>
double norm_rel_err(const std::vector<A>& a, const std::vector<B>& b) {
  REQUIRE(a.size() == b.size());
  return norm_rel_err(a.data(), b.data(), a.size());
}

/// A fresh empty directory under the system temp dir (named `<prefix>XXXXXX`, made by mkdtemp,
/// REQUIREd to succeed), removed with everything in it at scope exit.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& prefix) {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "XXXXXX")).string();
    REQUIRE(mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  /// The directory itself.
  std::string str() const { return path.string(); }
  /// The path of `name` inside the directory.
  std::string file(const std::string& name) const { return (path / name).string(); }
};

/// what() of the exception of type E (or derived) that `f` throws; `if_none` when it throws
/// nothing. Exceptions of other types propagate.
template <class E = std::exception>
std::string message_of(const std::function<void()>& f, const std::string& if_none = "<no exception>") {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return if_none;
}

/// parse_options on the command line `vitddp args...`.
inline vitddp::Options parse_args(const std::vector<std::string>& args) {
  std::vector<const char*> argv = {"vitddp"};
  for (auto& a : args) argv.push_back(a.c_str());
  return vitddp::parse_options((int)argv.size(), argv.data());
}

/// The message of the OptionError that parsing `vitddp args...` throws ("" when it parses).
inline std::string option_error(const std::vector<std::string>& args) {
  try {
    parse_args(args);
  } catch (const vitddp::OptionError& e) {
    return e.what();
  }
  return "";
}

/// Options of a short single-process engine run for the engine tests: `model`, batch `batch`,
/// random init, no DDP, one data worker, `steps` timed steps and no warm-up or cool-down steps.
inline vitddp::Options engine_test_options(const std::string& model, int batch, int steps) {
  vitddp::Options o;
  o.model = model;
  o.batch_size = batch;
  o.init = vitddp::InitScheme::Random;
  o.ddp = false;
  o.data_workers = 1;
  o.warmup_steps = 0;
  o.steps = steps;
  o.cooldown_steps = 0;
  return o;
}

/// `batch` images of config `c`, standard normal (stream 0 of `seed`).
inline std::vector<float> random_images(const vitddp::ViTConfig& c, int batch, uint64_t seed) {
  std::vector<float> img(static_cast<size_t>(batch) * c.channels * c.image_size * c.image_size);
  for (size_t i = 0; i < img.size(); ++i) img[i] = static_cast<float>(vitddp::rand_normal(seed, 0, i));
  return img;
}

/// `batch` labels in [0, c.num_classes) (stream 1 of `seed`).
inline std::vector<int32_t> random_labels(const vitddp::ViTConfig& c, int batch, uint64_t seed) {
  std::vector<int32_t> lab(batch);
  for (int b = 0; b < batch; ++b)
    lab[b] = static_cast<int32_t>(vitddp::rand_bits(seed, 1, b) % static_cast<uint64_t>(c.num_classes));
  return lab;
}

/// All parameters of layout `L` in element type T, initialised by InitScheme::Random from `seed`.
template <typename T = float>
std::vector<T> random_params(const vitddp::ParamLayout& L, uint64_t seed) {
  std::vector<T> p(L.total);
  vitddp::init_params(L, vitddp::InitScheme::Random, seed, p.data());
  return p;
}

/// The documented gradient-ready groups (model/grad_ready.h), as sets of registration indices,
/// in the order the backward pass completes them.
inline std::vector<std::set<size_t>> expected_groups(const vitddp::ParamLayout& L) {
  std::vector<std::set<size_t>> groups;
  auto grp = [&](std::vector<std::string> names) {
    std::set<size_t> s;
    for (const auto& n : names) s.insert(L.index_of(n));
    groups.push_back(s);
  };
  grp({"heads.head.weight", "heads.head.bias"});
  grp({"encoder.ln.weight", "encoder.ln.bias"});
  for (int l = L.cfg.layers - 1; l >= 0; --l) {
    const std::string b = "encoder.layers.encoder_layer_" + std::to_string(l) + ".";
    grp({b + "mlp.3.weight", b + "mlp.3.bias"});
    grp({b + "mlp.0.weight", b + "mlp.0.bias"});
    grp({b + "ln_2.weight", b + "ln_2.bias"});
    grp({b + "self_attention.out_proj.weight", b + "self_attention.out_proj.bias"});
    grp({b + "self_attention.in_proj_weight", b + "self_attention.in_proj_bias"});
    grp({b + "ln_1.weight", b + "ln_1.bias"});
  }
  grp({"encoder.pos_embedding", "class_token"});
  grp({"conv_proj.weight", "conv_proj.bias"});
  return groups;
}

}  // namespace vitddp_test
