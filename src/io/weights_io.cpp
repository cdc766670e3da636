#include "src/io/weights_io.h"

#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <type_traits>

#include "src/io/h5_params.h"
#include "src/io/h5_util.h"
#include "src/io/output_path.h"

namespace vitddp {
namespace {

namespace fs = std::filesystem;
using h5::Handle;

constexpr const char* kFormat = "vitddp-weights";
constexpr int64_t kFormatVersion = 1;

using h5::dataset_shape;
using h5::Elem;
using h5::fail;
using h5::fail_errno;
using h5::fsync_path;
using h5::open_dataset;
using h5::open_readonly;
using h5::read_checked;
using h5::read_number_attr;
using h5::read_param_group;
using h5::read_string_attr;
using h5::shape_str;
using h5::write_int_attr;
using h5::write_string_attr;

// Writes the weights file to `tmp` (truncating any stale one) and closes it.
void write_weights_file(const std::string& tmp, const ParamLayout& layout, const float* host_params) {
  h5::QuietErrors quiet;
  Handle fapl(H5_CHECK(H5Pcreate(H5P_FILE_ACCESS), tmp), H5Pclose);
  // HDF5 1.8 file format: readable by every h5py / HDF5 >= 1.8, no file-consistency flags.
  H5_CHECK(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_V18), tmp);
  h5::WriteFile file(H5_CHECK(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), tmp), tmp);
  write_string_attr(file.get(), tmp + ":/@format", "format", kFormat);
  write_int_attr(file.get(), tmp + ":/@format_version", "format_version", kFormatVersion);
  write_string_attr(file.get(), tmp + ":/@model", "model", layout.cfg.name);
  write_int_attr(file.get(), tmp + ":/@num_classes", "num_classes", layout.cfg.num_classes);
  write_int_attr(file.get(), tmp + ":/@parameter_count", "parameter_count",
                 static_cast<int64_t>(layout.parameter_count()));
  h5::write_param_group(file.get(), tmp, "params", layout, host_params);
  file.close();
}

}  // namespace

void save_weights(const std::string& path, const ParamLayout& layout, const float* host_params, bool overwrite) {
  if (path.empty()) throw std::runtime_error("save_weights: empty path");
  if (const std::string e = output_directory_problem("save_weights: cannot create '" + path + "'", path); !e.empty())
    throw std::runtime_error(e);
  const fs::path parent = output_directory(path);
  std::error_code ec;
  if (!overwrite && fs::exists(fs::symlink_status(path, ec)))
    throw std::runtime_error("save_weights: refusing to overwrite existing file '" + path +
                             "' (overwrite not requested)");
  const std::string tmp = path + ".tmp";
  fs::remove(tmp, ec);  // a leftover scratch file: a new one, never written through a link
  try {
    write_weights_file(tmp, layout, host_params);
    fsync_path(tmp, false, "save_weights");
    if (overwrite) {
      if (std::rename(tmp.c_str(), path.c_str()) != 0) fail_errno("save_weights: cannot rename '" + tmp + "' to", path);
    } else {
      // link(2) fails with EEXIST instead of replacing a file created since the check above.
      if (::link(tmp.c_str(), path.c_str()) != 0) {
        if (errno == EEXIST)
          throw std::runtime_error("save_weights: refusing to overwrite existing file '" + path +
                                   "' (overwrite not requested)");
        fail_errno("save_weights: cannot link '" + tmp + "' to", path);
      }
      if (::unlink(tmp.c_str()) != 0) fail_errno("save_weights: cannot remove", tmp);
    }
    fsync_path(parent.string(), true, "save_weights");
  } catch (...) {
    fs::remove(tmp, ec);
    throw;
  }
}

void load_weights(const std::string& path, const ParamLayout& layout, float* host_params) {
  h5::QuietErrors quiet;
  Handle file = open_readonly(path);
  read_param_group(file.get(), path, "params", layout, host_params);
}

namespace {

// load_twin_forward's work on an open file.
void read_twin_forward(hid_t f, const std::string& path, const ParamLayout& layout, TwinForward& r) {
  const ViTConfig& c = layout.cfg;
  r.model = read_string_attr(f, path, "model");
  if (r.model != c.name)
    fail(path, "holds model '" + r.model + "' (root attribute 'model'), expected '" + c.name + "'");
  r.torch_version = read_string_attr(f, path, "torch_version");
  {
    const std::string label = "dataset /input/labels";
    Handle d = open_dataset(f, path, "/input/labels", label);
    const std::vector<int64_t> s = dataset_shape(d.get(), path + ":/input/labels");
    if (s.size() != 1 || s[0] < 1) fail(path, label + " has shape " + shape_str(s) + ", expected [batch] with batch >= 1");
    r.batch = static_cast<int>(s[0]);
  }
  const int64_t B = r.batch, K = c.num_classes;
  r.labels.resize(B);
  read_checked(f, path, "/input/labels", "dataset /input/labels", {B}, Elem::integer, r.labels.data());
  for (int64_t b = 0; b < B; ++b)
    if (r.labels[b] < 0 || r.labels[b] >= K)
      fail(path, "dataset /input/labels: label " + std::to_string(r.labels[b]) + " at index " + std::to_string(b) +
                     " is outside [0, " + std::to_string(K) + ")");
  r.images.resize(static_cast<size_t>(B) * c.channels * c.image_size * c.image_size);
  read_checked(f, path, "/input/images", "dataset /input/images", {B, c.channels, c.image_size, c.image_size},
               Elem::f32, r.images.data());
  r.logits.resize(static_cast<size_t>(B * K));
  read_checked(f, path, "/logits", "dataset /logits", {B, K}, Elem::f32, r.logits.data());
  read_checked(f, path, "/loss", "dataset /loss", {}, Elem::f32, &r.loss);
}

}  // namespace

TwinForward load_twin_forward(const std::string& path, const ParamLayout& layout) {
  h5::QuietErrors quiet;
  Handle file = open_readonly(path);
  TwinForward r;
  read_twin_forward(file.get(), path, layout, r);
  return r;
}

TwinReference load_twin_reference(const std::string& path, const ParamLayout& layout) {
  h5::QuietErrors quiet;
  Handle file = open_readonly(path);
  const hid_t f = file.get();
  TwinReference r;
  read_twin_forward(f, path, layout, r);
  r.seed = read_number_attr<int64_t>(f, path, "seed");
  r.sgd.lr = read_number_attr<double>(f, path, "lr");
  r.sgd.momentum = read_number_attr<double>(f, path, "momentum");
  r.sgd.weight_decay = read_number_attr<double>(f, path, "weight_decay");
  r.params.resize(layout.total);
  read_param_group(f, path, "params", layout, r.params.data());
  r.grads.resize(layout.total);
  read_param_group(f, path, "grads", layout, r.grads.data());
  r.params_after_3_steps.resize(layout.total);
  read_param_group(f, path, "params_after_3_steps", layout, r.params_after_3_steps.data());
  return r;
}

std::vector<float> load_float_array(const std::string& path, const std::string& dataset,
                                    const std::vector<int64_t>& shape) {
  h5::QuietErrors quiet;
  Handle file = open_readonly(path);
  size_t n = 1;
  for (int64_t s : shape) n *= static_cast<size_t>(s);
  std::vector<float> out(n);
  const std::string dset = dataset.empty() || dataset[0] != '/' ? "/" + dataset : dataset;
  read_checked(file.get(), path, dset, "dataset " + dset, shape, Elem::f32, out.data());
  return out;
}

std::string load_string_attr(const std::string& path, const std::string& name) {
  h5::QuietErrors quiet;
  Handle file = open_readonly(path);
  return read_string_attr(file.get(), path, name);
}

}  // namespace vitddp
