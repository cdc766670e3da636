#include "src/io/checkpointer.h"

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <regex>
#include <utility>
#include <vector>
#include <stdexcept>
#include <string>
#include <system_error>

#include "src/engines/optimizer.h"
#include "src/io/output_path.h"

namespace vitddp {
namespace {

namespace fs = std::filesystem;

const std::string kStepKey = "{step}";  // what checkpoint_file replaces in a --checkpoint-path pattern

}  // namespace

ResumePoint read_resume_point(const Options& o, const World& w, const ParamLayout& layout) {
  ResumePoint r;
  try {
    r.header = read_checkpoint_header(o.resume);
  } catch (const std::exception& e) {
    throw std::runtime_error("--resume: " + std::string(e.what()));
  }
  const std::string why = checkpoint_mismatch(r.header, o, w.world_size);
  if (!why.empty()) throw std::runtime_error(why + " (checkpoint '" + o.resume + "')");
  if (r.header.model != layout.cfg.name)
    throw std::runtime_error("--model: the checkpoint '" + o.resume + "' holds " + r.header.model + ", this run trains " +
                             layout.cfg.name);
  const int64_t expected = r.header.step * o.grad_accum_steps;
  if (r.header.batches_consumed[w.rank] != expected)
    throw std::runtime_error("--resume: checkpoint '" + o.resume + "' says rank " + std::to_string(w.rank) +
                             " consumed " + std::to_string(r.header.batches_consumed[w.rank]) + " batches in " +
                             std::to_string(r.header.step) + " steps of " + std::to_string(o.grad_accum_steps) +
                             " micro-batches (expected " + std::to_string(expected) + ")");
  try {
    r.state = read_checkpoint_state(o.resume, layout, optimizer_state_names(optimizer_spec(o)));
  } catch (const std::exception& e) {
    throw std::runtime_error("--resume: " + std::string(e.what()));
  }
  return r;
}

std::vector<std::string> checkpoint_files(const Options& o, int64_t first_step) {
  if (o.checkpoint_every <= 0) return {};
  const std::string& pattern = o.checkpoint_path;
  std::vector<std::string> files;
  const int64_t total = o.total_steps(), n = o.checkpoint_every;
  const bool per_step = checkpoint_file(pattern, 0) != checkpoint_file(pattern, 1);
  for (int64_t s = (first_step / n + 1) * n; s <= total && files.size() < 100000; s += n) {
    files.push_back(checkpoint_file(pattern, s));
    if (!per_step) return files;
  }
  if (files.empty() || per_step) files.push_back(checkpoint_file(pattern, total));
  if (files.size() > 1 && files.back() == files[files.size() - 2]) files.pop_back();
  return files;
}

std::vector<std::string> checkpoint_pattern_candidates(const std::string& pattern) {
  const std::string name = fs::path(pattern).filename().string();
  const size_t first = name.find(kStepKey);
  if (first == std::string::npos) return {};
  const std::string head = name.substr(0, first), tail = name.substr(name.rfind(kStepKey) + kStepKey.size());
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(output_directory(pattern), ec), end; !ec && it != end; it.increment(ec)) {
    const std::string f = it->path().filename().string();
    if (f.size() >= head.size() + tail.size() && f.compare(0, head.size(), head) == 0 &&
        f.compare(f.size() - tail.size(), tail.size(), tail) == 0)
      out.push_back(it->path().string());
  }
  return out;
}

int64_t checkpoint_step_of(const std::string& pattern, const std::string& path) {
  const std::string& key = kStepKey;
  if (pattern.find(key) == std::string::npos || output_directory(pattern).string().find(key) != std::string::npos)
    return -1;
  // The resolved pattern as a regular expression: every {step} a run of digits (the same number).
  const std::string resolved = resolved_path(pattern).string();
  std::string re;
  for (size_t i = 0; i < resolved.size();) {
    if (resolved.compare(i, key.size(), key) == 0) {
      re += "([0-9]+)";
      i += key.size();
      continue;
    }
    if (std::string("\\^$.|?*+()[]{}").find(resolved[i]) != std::string::npos) re += '\\';
    re += resolved[i++];
  }
  std::smatch m;
  const std::string target = resolved_path(path).string();
  if (!std::regex_match(target, m, std::regex(re)) || m[1].length() > 18) return -1;
  const int64_t step = std::stoll(m[1].str());
  return checkpoint_file(resolved, step) == target ? step : -1;
}

Checkpointer::Checkpointer(const Options& o, const World& w, const ParamLayout& layout, std::string git_commit)
    : opts_(o), world_(w), layout_(layout), git_commit_(std::move(git_commit)), every_(o.checkpoint_every) {}

bool Checkpointer::due(int64_t steps_done, bool last, bool signal_stop) const {
  if (!enabled()) return false;
  return steps_done % every_ == 0 || last || signal_stop;
}

std::string Checkpointer::write(const Engine& engine, int64_t steps_done, int64_t batches_consumed) {
  CheckpointHeader h;
  h.model = layout_.cfg.name;
  h.step = steps_done;
  h.world_size = world_.world_size;
  h.lr_decay_steps = lr_decay_steps(opts_);
  h.options = option_values(opts_);
  h.git_commit = git_commit_;
  h.batches_consumed.assign(world_.rank == 0 ? world_.world_size : 0, 0);
  MPI_CHECK(MPI_Gather(&batches_consumed, 1, MPI_INT64_T, h.batches_consumed.data(), 1, MPI_INT64_T, 0,
                       MPI_COMM_WORLD));
  std::string error;
  const std::string file = checkpoint_file(opts_.checkpoint_path, steps_done);
  // All replicas hold the same parameters and optimizer state (same start, same averaged
  // gradients, same updates): rank 0's are the run's. With --shard-optimizer each rank holds only
  // its shard of the optimizer state, and train_state() is collective: every rank calls it and
  // rank 0 receives the full state, so the file is the same as without sharding.
  TrainState state;
  if (world_.rank == 0 || (opts_.shard_optimizer && opts_.ddp)) {
    try {
      state = engine.train_state();
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  if (world_.rank == 0 && error.empty()) {
    try {
      const bool crash = opts_.debug_crash_in_checkpoint && written_.empty();
      write_checkpoint(file, layout_, h, state, [crash]() {
        if (crash) ::kill(::getpid(), SIGKILL);  // fault injection: the .tmp is complete, not yet renamed
      });
      written_.push_back(steps_done);
      last_file_ = file;
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  if (!all_ranks_ok(error.empty())) return error.empty() ? "checkpoint failed on rank 0" : error;
  return "";
}

}  // namespace vitddp
