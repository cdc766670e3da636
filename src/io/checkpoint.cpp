#include "src/io/checkpoint.h"

#include <hdf5.h>

#include <cerrno>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <stdexcept>

#include "src/io/h5_params.h"
#include "src/io/h5_util.h"
#include "src/engines/optimizer.h"
#include "src/io/output_path.h"

namespace vitddp {
namespace {

namespace fs = std::filesystem;
using h5::Handle;

constexpr const char* kFormat = "vitddp-checkpoint";
constexpr int64_t kFormatVersion = 1;
constexpr const char* kOptionPrefix = "option.";

// The whole checkpoint into `tmp` (truncated), closed before returning.
void write_file(const std::string& tmp, const ParamLayout& layout, const CheckpointHeader& h, const TrainState& s) {
  h5::QuietErrors quiet;
  Handle fapl(H5_CHECK(H5Pcreate(H5P_FILE_ACCESS), tmp), H5Pclose);
  H5_CHECK(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_V18), tmp);
  h5::WriteFile file(H5_CHECK(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), tmp), tmp);
  const hid_t f = file.get();
  const std::string root = tmp + ":/@";
  h5::write_string_attr(f, root + "format", "format", kFormat);
  h5::write_int_attr(f, root + "format_version", "format_version", kFormatVersion);
  h5::write_string_attr(f, root + "model", "model", layout.cfg.name);
  h5::write_int_attr(f, root + "num_classes", "num_classes", layout.cfg.num_classes);
  h5::write_int_attr(f, root + "parameter_count", "parameter_count", static_cast<int64_t>(layout.parameter_count()));
  h5::write_int_attr(f, root + "step", "step", h.step);
  h5::write_int_attr(f, root + "optimizer_steps", "optimizer_steps", s.optimizer_steps);
  h5::write_int_attr(f, root + "world_size", "world_size", h.world_size);
  h5::write_int_attr(f, root + "lr_decay_steps", "lr_decay_steps", h.lr_decay_steps);
  h5::write_string_attr(f, root + "git_commit", "git_commit", h.git_commit);
  h5::write_string_attr(f, root + "created", "created", h5::utc_now_iso8601());
  std::string optimizer;
  for (const auto& [k, v] : h.options) {
    h5::write_string_attr(f, root + kOptionPrefix + k, kOptionPrefix + k, v);
    if (k == "optimizer") optimizer = v;
  }
  h5::write_string_attr(f, root + "optimizer", "optimizer", optimizer);

  h5::write_param_group(f, tmp, "params", layout, s.params.data());
  for (const auto& [name, buf] : s.optimizer) {
    if (buf.size() != layout.total)
      throw std::invalid_argument("write_checkpoint: optimizer buffer " + name + " holds " + std::to_string(buf.size()) +
                                  " elements, expected " + std::to_string(layout.total));
    h5::write_param_group(f, tmp, "optimizer/" + name, layout, buf.data());
  }
  {
    const std::string where = tmp + ":/data/batches_consumed";
    Handle lcpl = h5::intermediate_groups_lcpl(where);
    const hsize_t n = h.batches_consumed.size();
    Handle space(H5_CHECK(H5Screate_simple(1, &n, nullptr), where), H5Sclose);
    Handle d(H5_CHECK(H5Dcreate2(f, "data/batches_consumed", H5T_STD_I64LE, space.get(), lcpl.get(), H5P_DEFAULT,
                                 H5P_DEFAULT),
                      where),
             H5Dclose);
    if (n > 0)
      H5_CHECK(H5Dwrite(d.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, h.batches_consumed.data()), where);
    h5::write_string_attr(d.get(), where, "units", "batches");
    h5::write_string_attr(d.get(), where, "description",
                          "data-source batches (micro-batches) each rank consumed in the completed steps");
  }
  file.close();
}

// Root attributes named option.<name>, as (name, value).
std::vector<std::pair<std::string, std::string>> read_options(hid_t f, const std::string& path) {
  std::vector<std::string> names;
  auto collect = [](hid_t, const char* name, const H5A_info_t*, void* out) -> herr_t {
    const std::string n(name);
    if (n.rfind(kOptionPrefix, 0) == 0) static_cast<std::vector<std::string>*>(out)->push_back(n);
    return 0;
  };
  H5_CHECK(H5Aiterate2(f, H5_INDEX_NAME, H5_ITER_INC, nullptr, collect, &names), path);
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& n : names) out.emplace_back(n.substr(std::string(kOptionPrefix).size()), h5::read_string_attr(f, path, n));
  return out;
}

std::string value_of(const std::vector<std::pair<std::string, std::string>>& kv, const std::string& key, bool* found) {
  for (const auto& [k, v] : kv)
    if (k == key) {
      *found = true;
      return v;
    }
  *found = false;
  return "";
}

}  // namespace

void write_checkpoint(const std::string& path, const ParamLayout& layout, const CheckpointHeader& header,
                      const TrainState& state, const std::function<void()>& before_publish) {
  if (path.empty()) throw std::runtime_error("write_checkpoint: empty path");
  if (const std::string e = output_directory_problem("checkpoint '" + path + "'", path); !e.empty())
    throw std::runtime_error(e);
  const fs::path parent = output_directory(path);
  std::error_code ec;
  const std::string tmp = path + ".tmp";
  fs::remove(tmp, ec);  // a leftover scratch file: a new one, never written through a link
  try {
    write_file(tmp, layout, header, state);
    h5::fsync_path(tmp, false, "checkpoint");
    if (before_publish) before_publish();
    fs::rename(tmp, path);  // rename(2): atomic, replaces an older checkpoint
    h5::fsync_path(parent.string(), true, "checkpoint");
  } catch (const fs::filesystem_error& e) {
    fs::remove(tmp, ec);
    throw std::runtime_error("checkpoint: cannot rename '" + tmp + "' to '" + path + "': " + e.code().message());
  } catch (...) {
    fs::remove(tmp, ec);
    throw;
  }
}

CheckpointHeader read_checkpoint_header(const std::string& path) {
  h5::QuietErrors quiet;
  Handle file = h5::open_readonly(path);
  const hid_t f = file.get();
  if (H5_CHECK(H5Aexists(f, "format"), path) <= 0 || h5::read_string_attr(f, path, "format") != kFormat)
    h5::fail(path, "is not a vitddp checkpoint (root attribute format is not '" + std::string(kFormat) +
                       "'; a weights file can start a run with --init-from)");
  const int64_t version = h5::read_number_attr<int64_t>(f, path, "format_version");
  if (version != kFormatVersion)
    h5::fail(path, "checkpoint format_version " + std::to_string(version) + " is not supported (this build reads " +
                       std::to_string(kFormatVersion) + ")");
  CheckpointHeader h;
  h.model = h5::read_string_attr(f, path, "model");
  h.step = h5::read_number_attr<int64_t>(f, path, "step");
  h.world_size = h5::read_number_attr<int64_t>(f, path, "world_size");
  h.lr_decay_steps = h5::read_number_attr<int64_t>(f, path, "lr_decay_steps");
  h.git_commit = h5::read_string_attr(f, path, "git_commit");
  if (h.step < 0) h5::fail(path, "root attribute step is negative");
  if (h.world_size < 1) h5::fail(path, "root attribute world_size is not positive");
  h.batches_consumed.resize(static_cast<size_t>(h.world_size));
  h5::read_checked(f, path, "/data/batches_consumed", "dataset /data/batches_consumed", {h.world_size}, h5::Elem::i64,
                   h.batches_consumed.data());
  h.options = read_options(f, path);
  return h;
}

TrainState read_checkpoint_state(const std::string& path, const ParamLayout& layout,
                                 const std::vector<std::string>& state_names) {
  h5::QuietErrors quiet;
  Handle file = h5::open_readonly(path);
  TrainState s;
  s.params.resize(layout.total);
  h5::read_param_group(file.get(), path, "params", layout, s.params.data());
  for (const std::string& name : state_names) {
    std::vector<float> buf(layout.total);
    h5::read_param_group(file.get(), path, "optimizer/" + name, layout, buf.data());
    s.optimizer.emplace_back(name, std::move(buf));
  }
  s.optimizer_steps = h5::read_number_attr<int64_t>(file.get(), path, "optimizer_steps");
  if (s.optimizer_steps < 0) h5::fail(path, "root attribute optimizer_steps is negative");
  return s;
}

std::string checkpoint_mismatch(const CheckpointHeader& h, const Options& o, int world_size) {
  if (h.world_size != world_size)
    return "ranks: the checkpoint was written by " + std::to_string(h.world_size) + " rank(s), this run has " +
           std::to_string(world_size) + " (the data split and positions depend on it)";
  const std::vector<std::string> must_match = {
      "model",     "num-classes", "batch-size",  "grad-accum-steps", "data",       "seed",
      "backend",   "precision",   "compression", "optimizer",        "lr",         "momentum",
      "weight-decay", "adam-beta1", "adam-beta2", "adam-eps",        "lr-schedule", "lr-warmup-steps",
      "min-lr",    "attention",   "patch-embed", "gemm-sm-carveout"};
  // Options added after checkpoints existed: a file without them was written with their default.
  const std::vector<std::pair<std::string, std::string>> later = {{"gemm-sm-carveout", "0"}};
  const auto mine = option_values(o);
  for (const std::string& name : must_match) {
    bool in_file = false, in_run = false;
    std::string theirs = value_of(h.options, name, &in_file);
    const std::string ours = value_of(mine, name, &in_run);
    for (const auto& [later_name, default_value] : later)
      if (!in_file && name == later_name) {
        theirs = default_value;
        in_file = true;
      }
    if (!in_file) return "--" + name + ": the checkpoint does not record it (written by an older vitddp?)";
    if (theirs != ours)
      return "--" + name + ": the checkpoint was written with '" + theirs + "', this run has '" + ours + "'";
  }
  if (o.lr_schedule == LrScheduleKind::WarmupCosine && h.lr_decay_steps != lr_decay_steps(o))
    return "--lr-decay-steps: the checkpoint's cosine schedule decays over " + std::to_string(h.lr_decay_steps) +
           " steps, this run's over " + std::to_string(lr_decay_steps(o)) + " (give --lr-decay-steps " +
           std::to_string(h.lr_decay_steps) + " to continue it)";
  if (h.step >= o.total_steps())
    return "--resume: the checkpoint is at step " + std::to_string(h.step) + " but this run has " +
           std::to_string(o.total_steps()) +
           " steps in all (--warmup-steps + --steps + --cooldown-steps, counted from the original run's step 0): "
           "nothing left to run";
  return "";
}

std::string default_checkpoint_path(const std::string& out) {
  const std::string ext = ".h5";
  if (out.size() > ext.size() && out.compare(out.size() - ext.size(), ext.size(), ext) == 0)
    return out.substr(0, out.size() - ext.size()) + ".ckpt.h5";
  return out + ".ckpt.h5";
}

std::string checkpoint_file(const std::string& pattern, int64_t step) {
  const std::string key = "{step}";
  std::string out = pattern;
  for (size_t pos = out.find(key); pos != std::string::npos; pos = out.find(key, pos))
    out.replace(pos, key.size(), std::to_string(step));
  return out;
}

}  // namespace vitddp
