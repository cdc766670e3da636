// The run-time side of checkpoints: when a run writes one, the collective work of writing it, the
// start-up checks of --checkpoint-path, and reading the --resume point.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/param_layout.h"
#include "mpi/world/world.h"
#include "src/io/checkpoint.h"
#include "src/engines/engine.h"
#include "src/app/options.h"
#include "src/engines/train_state.h"

namespace vitddp {

/// A --resume run's starting point, read on every rank before any device work.
struct ResumePoint {
  CheckpointHeader header;  ///< step, data positions, options of the writing run
  TrainState state;         ///< parameters and optimizer state to load into the engine
};

/// Reads and checks checkpoint o.resume for a run with options `o` on `w`: header, compatibility
/// (checkpoint_mismatch), model and parameters (read_checkpoint_state with the run's optimizer
/// buffers). Throws std::runtime_error with one line naming the option or the file at fault.
/// Local work only (no collective): the caller agrees on the outcome with all_ranks_ok.
ResumePoint read_resume_point(const Options& o, const World& w, const ParamLayout& layout);

/// The files a run with options `o` starting at step `first_step` (0, or the checkpoint's step)
/// writes checkpoints to: checkpoint_file(--checkpoint-path, s) for every --checkpoint-every-th
/// step s after first_step (at most 100000) and the last step; one file when the pattern has no
/// {step}; none without --checkpoint-every. (A signal stop writes one more, at a step not known
/// in advance.) The start-up checks (output_paths_problem) check each.
std::vector<std::string> checkpoint_files(const Options& o, int64_t first_step);

/// The step s at which checkpoint_file(`pattern`, s) is the file `path` names (both resolved with
/// resolved_path: symbolic links followed), or -1 when there is none or `pattern` has no {step}
/// in its file name. E.g. ("ck-{step}.h5", "./ck-7.h5") -> 7. The start-up checks use it for the
/// checkpoint a signal stop writes at a step not known in advance.
int64_t checkpoint_step_of(const std::string& pattern, const std::string& path);

/// The files in the directory of checkpoint `pattern` whose names start and end as the pattern's
/// file name around its {step}s: the candidates for checkpoint_step_of among what is already there
/// (none without {step}). A directory that cannot be listed, or stops being listable, gives what
/// was read so far; never throws a file-system error.
std::vector<std::string> checkpoint_pattern_candidates(const std::string& pattern);

/// When and where a run writes checkpoints (--checkpoint-every, --checkpoint-path), and writing
/// them. One per run, on every rank.
class Checkpointer {
 public:
  /// `git_commit` is recorded in each file. Disabled when o.checkpoint_every == 0.
  Checkpointer(const Options& o, const World& w, const ParamLayout& layout, std::string git_commit);

  bool enabled() const { return every_ > 0; }

  /// Whether a checkpoint is due after `steps_done` steps of the run (counted from the original
  /// run's step 0): every --checkpoint-every steps, after the run's last step (`last`), and when
  /// the run stops on a signal (`signal_stop`). Never when disabled.
  bool due(int64_t steps_done, bool last, bool signal_stop) const;

  /// Collective, every rank calls it between steps: gathers each rank's `batches_consumed` (data-
  /// source batches used by the completed steps) to rank 0, which takes the engine's state
  /// (Engine::train_state; with --shard-optimizer every rank takes part, the shards are gathered
  /// to rank 0) and writes checkpoint_file(--checkpoint-path, steps_done) crash-safely
  /// (write_checkpoint); then the ranks agree. Returns "" on every rank on success, else the
  /// error (rank 0's message; "failed on rank 0" elsewhere). --debug-crash-in-checkpoint kills
  /// rank 0 with SIGKILL between the .tmp file and the rename of the first checkpoint.
  std::string write(const Engine& engine, int64_t steps_done, int64_t batches_consumed);

  /// Steps at which checkpoints were written, and the last file (rank 0; "" when none).
  const std::vector<int64_t>& written_steps() const { return written_; }
  const std::string& last_file() const { return last_file_; }

 private:
  Options opts_;
  World world_;
  const ParamLayout& layout_;
  std::string git_commit_;
  int64_t every_;
  std::vector<int64_t> written_;
  std::string last_file_;
};

}  // namespace vitddp
