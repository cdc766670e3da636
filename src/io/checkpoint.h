// Checkpoint files: everything needed to continue a run bit for bit (parameters, optimizer state,
// step counters, data position, the options that must not change), in HDF5, written crash-safely.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "model/param_layout.h"
#include "src/app/options.h"
#include "src/engines/train_state.h"

namespace vitddp {

/// Checkpoint file layout (format "vitddp-checkpoint", version 1). It is also a weights file
/// (src/io/weights_io.h): --init-from and torch_twin.py --load read its /params.
///   /params/<torchvision name>                 float32, the parameters (as --save-weights)
///   /optimizer/<state>/<torchvision name>      float32, same shapes: <state> = momentum_buffer
///                                              (SGD with momentum), exp_avg and exp_avg_sq (AdamW),
///                                              torch's optimizer state_dict names; none for plain SGD
///   /data/batches_consumed                     int64 [world_size]: data-source batches (micro-
///                                              batches) each rank consumed in the completed steps
///   root attributes                            format, format_version, model, num_classes,
///                                              parameter_count (weights file); step, optimizer_steps,
///                                              world_size, optimizer, lr_decay_steps, git_commit,
///                                              created (UTC ISO 8601); option.<name> for every option
/// No random-generator state is stored because none exists: synthetic batches (host and device)
/// are a pure function of (seed, rank, batch index), IDX batches of (seed, epoch, rank, batch
/// index) with the epoch = batch index / batches per epoch; dropout is 0; the initialisation is
/// not needed after step 0; PowerSGD (whose state is not stored) refuses checkpoints.
struct CheckpointHeader {
  std::string model;                      ///< ViT variant (attribute model)
  int64_t step = 0;                       ///< optimizer steps of the run completed (the next step's 0-based index)
  int64_t world_size = 0;                 ///< ranks of the run that wrote it
  int64_t lr_decay_steps = 0;             ///< the schedule's resolved length (lr_decay_steps(options))
  std::vector<int64_t> batches_consumed;  ///< per rank, [world_size]
  std::vector<std::pair<std::string, std::string>> options;  ///< option_values of the writing run
  std::string git_commit;                 ///< build that wrote it (informational)
};

/// Writes a checkpoint of `layout` to `path` crash-safely: the whole file is written to
/// `path + ".tmp"` (a stale one is truncated), closed and fsync'd; then `before_publish` (may be
/// empty; the fault-injection hook of --debug-crash-in-checkpoint) runs; then the .tmp is renamed
/// over `path` (rename(2): atomic on POSIX, an existing checkpoint is replaced) and the directory is
/// fsync'd. A crash at any point leaves under `path` either nothing, the previous checkpoint or the
/// complete new one. `state.optimizer` buffers are stored under their names; header.options is
/// written as option.<name> attributes. Throws std::runtime_error naming the path when the
/// directory is missing, not a directory or not writable (output_directory_problem) or HDF5 / the
/// file system fails (the .tmp is then removed).
void write_checkpoint(const std::string& path, const ParamLayout& layout, const CheckpointHeader& header,
                      const TrainState& state, const std::function<void()>& before_publish = {});

/// Reads the header of checkpoint `path` (no tensors). Throws std::runtime_error naming the file
/// and the attribute at fault: missing or not HDF5, format attribute other than
/// "vitddp-checkpoint", unsupported format_version, a missing attribute or /data/batches_consumed
/// of a length other than world_size.
CheckpointHeader read_checkpoint_header(const std::string& path);

/// Reads the parameters and the optimizer buffers `state_names` (optimizer_state_names of the run,
/// which read_checkpoint_header + checkpoint_mismatch showed to match) of checkpoint `path` for
/// `layout`, and its optimizer_steps. Throws std::runtime_error naming the file, group and
/// parameter (as load_weights: missing, mis-shaped, not float32, unexpected entries).
TrainState read_checkpoint_state(const std::string& path, const ParamLayout& layout,
                                 const std::vector<std::string>& state_names);

/// "" when a run with options `o` on `world_size` ranks may resume from checkpoint `h`; otherwise
/// one line naming the first option that differs, e.g. "--batch-size: the checkpoint was written
/// with 8, this run has 4". Must match: the model (--model, --num-classes), the rank count, the
/// data (--data, --seed, --batch-size, --grad-accum-steps), the numerics (--backend, --precision,
/// --compression), the optimizer (--optimizer, --lr, --momentum, --weight-decay, --adam-*) and the
/// schedule (--lr-schedule, --lr-warmup-steps, --min-lr, and for cosine its resolved length);
/// and the checkpoint's step must be below the run's total steps. Everything else (timing window
/// split, buckets, overlap, workers, files, logging) may differ.
std::string checkpoint_mismatch(const CheckpointHeader& h, const Options& o, int world_size);

/// The default --checkpoint-path for results file `out`: "run.h5" -> "run.ckpt.h5"; a name
/// without ".h5" gets ".ckpt.h5" appended.
std::string default_checkpoint_path(const std::string& out);

/// The file of the checkpoint at `step`: `pattern` with every "{step}" replaced by the step number
/// (no padding), or `pattern` itself when it has none.
std::string checkpoint_file(const std::string& pattern, int64_t step);

}  // namespace vitddp
