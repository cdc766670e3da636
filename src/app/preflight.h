// The start-up checks of a training run: every input is read and checked on every rank, and every
// output checked (the results file on rank 0 too), before any device work.
#pragma once
#include <memory>
#include <optional>
#include <vector>

#include "model/param_layout.h"
#include "mpi/world/world.h"
#include "src/io/checkpointer.h"
#include "src/data/data.h"
#include "src/app/options.h"
#include "src/io/output_path.h"
#include "src/io/results_h5.h"

namespace vitddp {

/// What the start-up checks read, for the run to use.
struct RunInputs {
  std::shared_ptr<const IdxDataset> dataset;    ///< --data idx:DIR training split; null for the other sources
  std::shared_ptr<const IdxDataset> eval_data;  ///< the --eval-every split; null without --eval-every
  std::vector<float> initial;                   ///< --init-from parameters (layout.total floats); empty without
  std::optional<ResumePoint> resume;            ///< --resume's checkpoint
  std::optional<ResultsFile> results;           ///< rank 0: the --out file once created (create_results_file)
  /// First step of this run (0-based): the checkpoint's step, else 0.
  int start_step() const { return resume ? (int)resume->header.step : 0; }
};


/// Collective: the start-up checks, in order, each agreed on by every rank (agree_or_report):
///  1. --data: the training split is read (load_training_data), its labels fit the model's
///     classes (label_problem), and it holds at least one batch per rank;
///  2. --eval-split: the evaluation split (load_eval_data);
///  3. --init-from is read and checked by name, shape and finite values;
///  4. --resume: the checkpoint is read and checked (read_resume_point), and a --debug-nan-at-step
///     or --debug-fail-at-step before the step it resumes at is refused;
///  5. every output (run_outputs) against each other and every input (run_inputs):
///     output_paths_problem, on every rank; then, on rank 0, output_creation_problem (an absent
///     output is created and removed again at once);
///  6. rank 0 checks that it can create the results file --out (ResultsFile::create_trial_problem:
///     an absent one is created and removed again). A run creates it once its engine is up
///     (create_results_file), so a failing set-up leaves a file it would replace (--overwrite) as
///     it was.
/// Returns false on every rank at the first check that failed on some rank, after rank 0 printed
/// one line "vitddp: error: ..." with the lowest failing rank's message: the caller returns exit
/// code 2. Nothing that needs the device runs here.
bool preflight(const Options& o, const World& w, const ParamLayout& layout, RunInputs* in);

/// Collective: rank 0 creates the results file --out into in->results (ResultsFile::create); the
/// ranks agree on the outcome as in preflight (one line "vitddp: error: --out: ...", false on every
/// rank: exit code 2).
bool create_results_file(const Options& o, const World& w, RunInputs* in);

/// Every file a run with options `o` writes, first step `first_step`, for output_paths_problem:
/// --out, --save-weights, --trace, then each of checkpoint_files (which may be the --resume file),
/// then the checkpoint a signal stop could write over another output, one of `inputs` or a file
/// already in the pattern's directory (a path of the pattern's form with a step of this run:
/// checkpoint_step_of), then the scratch files of those written through one (with_scratch_files).
/// Add a new output here.
std::vector<OutputFile> run_outputs(const Options& o, int64_t first_step, const std::vector<InputFile>& inputs);

/// Every file the run reads: --init-from, --resume, and the image and label files of the --data
/// idx:DIR splits read into `in` (training, evaluation). Add a new input here.
std::vector<InputFile> run_inputs(const Options& o, const RunInputs& in);

}  // namespace vitddp
