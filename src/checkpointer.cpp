#include "src/checkpointer.h"

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <utility>
#include <vector>
#include <stdexcept>

#include "src/optimizer.h"
#include "src/output_path.h"

namespace vitddp {
namespace {

namespace fs = std::filesystem;

/// True when `a` and `b` name the same existing file (or are the same string).
bool same_file(const std::string& a, const std::string& b) {
  if (a == b) return true;
  std::error_code ec;
  return fs::equivalent(a, b, ec);
}

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

std::string checkpoint_path_problem(const Options& o, int64_t first_step) {
  if (o.checkpoint_every <= 0) return "";
  const std::string& pattern = o.checkpoint_path;
  if (const std::string e = output_directory_problem("--checkpoint-path", checkpoint_file(pattern, 0)); !e.empty())
    return e;
  std::error_code ec;
  // The files this run will write: every N-th step after first_step, and the last step. (A
  // signal stop writes one more, at a step not known in advance: it replaces what is there.)
  std::vector<int64_t> steps;
  const int64_t total = o.total_steps(), n = o.checkpoint_every;
  const bool per_step = checkpoint_file(pattern, 0) != checkpoint_file(pattern, 1);
  for (int64_t s = (first_step / n + 1) * n; s <= total && steps.size() < 100000; s += n) {
    steps.push_back(s);
    if (!per_step) break;
  }
  steps.push_back(total);
  // A checkpoint renamed over the results file (open for writing), the weights file or the trace
  // would destroy them: refused even with --overwrite.
  auto same_path = [&ec](const std::string& a, const std::string& b) {
    return !a.empty() && !b.empty() &&
           fs::absolute(a, ec).lexically_normal() == fs::absolute(b, ec).lexically_normal();
  };
  for (int64_t s : steps) {
    const std::string f = checkpoint_file(pattern, s);
    for (const auto& [opt, other] : {std::pair<const char*, const std::string*>{"--out", &o.out},
                                     {"--save-weights", &o.save_weights}, {"--trace", &o.trace}})
      if (same_path(f, *other))
        return "--checkpoint-path: '" + f + "' is also the " + opt + " file; give the checkpoints their own path";
  }
  if (o.overwrite) return "";
  for (int64_t s : steps) {
    const std::string f = checkpoint_file(pattern, s);
    if (fs::exists(fs::symlink_status(f, ec)) && !(!o.resume.empty() && same_file(f, o.resume)))
      return "--checkpoint-path: '" + f + "' exists (use --overwrite to replace it)";
  }
  return "";
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
  if (world_.rank == 0) {
    try {
      // All replicas hold the same parameters and optimizer state (same start, same averaged
      // gradients, same updates): rank 0's are the run's.
      const TrainState state = engine.train_state();
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
