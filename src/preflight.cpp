#include "src/preflight.h"

#include <filesystem>
#include <stdexcept>
#include <string>

#include "src/batch_feed.h"
#include "src/evaluation.h"
#include "src/output_path.h"
#include "src/rank_agreement.h"
#include "src/weights_io.h"

namespace vitddp {
namespace {

/// Check 1: the training split of --data idx:DIR (null for the other sources).
std::shared_ptr<const IdxDataset> checked_training_data(const Options& o, const World& w, const ParamLayout& layout) {
  std::shared_ptr<const IdxDataset> dataset = load_training_data(o);
  if (!dataset) return dataset;
  for (uint8_t label : dataset->labels)
    if (label >= layout.cfg.num_classes)
      throw std::runtime_error("label " + std::to_string(label) + " does not fit the model's " +
                               std::to_string(layout.cfg.num_classes) + " classes (set --num-classes)");
  if (dataset->count / w.world_size < o.batch_size)
    throw std::runtime_error(std::to_string(dataset->count) + " images are fewer than one batch of " +
                             std::to_string(o.batch_size) + " per rank");
  return dataset;
}

/// Check 3: --init-from's parameters (empty without it); --save-weights' and --trace's paths, so a
/// long run does not fail at its end.
std::vector<float> checked_weights_and_outputs(const Options& o, const ParamLayout& layout) {
  std::vector<float> initial;
  if (!o.init_from.empty()) {
    initial.assign(layout.total, 0.0f);
    try {
      load_weights(o.init_from, layout, initial.data());
    } catch (const std::exception& e) {
      throw std::runtime_error("--init-from: " + std::string(e.what()));
    }
  }
  if (!o.save_weights.empty()) {
    if (const std::string e = output_directory_problem("--save-weights", o.save_weights); !e.empty())
      throw std::runtime_error(e);
    if (std::filesystem::exists(o.save_weights) && !o.overwrite)
      throw std::runtime_error("--save-weights: '" + o.save_weights + "' exists (use --overwrite to replace it)");
  }
  if (!o.trace.empty()) {
    if (const std::string e = output_directory_problem("--trace", o.trace); !e.empty()) throw std::runtime_error(e);
    if (std::filesystem::exists(o.trace) && !o.overwrite)
      throw std::runtime_error("--trace: '" + o.trace + "' exists (use --overwrite to replace it)");
  }
  return initial;
}

}  // namespace

bool preflight(const Options& o, const World& w, const ParamLayout& layout, RunInputs* in) {
  if (!agree_or_report(w, error_of([&] { in->dataset = checked_training_data(o, w, layout); }), "--data: "))
    return false;
  if (!agree_or_report(w, error_of([&] { in->eval_data = load_eval_data(o, in->dataset, layout.cfg.num_classes); })))
    return false;
  if (!agree_or_report(w, error_of([&] { in->initial = checked_weights_and_outputs(o, layout); }))) return false;
  const std::string resume_error = error_of([&] {
    if (!o.resume.empty()) in->resume.emplace(read_resume_point(o, w, layout));
    if (w.rank != 0) return;
    if (const std::string e = checkpoint_path_problem(o, in->start_step()); !e.empty()) throw std::runtime_error(e);
  });
  if (!agree_or_report(w, resume_error)) return false;
  const std::string file_error = error_of([&] {
    if (w.rank == 0) in->results.emplace(ResultsFile::create(o.out, o.overwrite));
  });
  return agree_or_report(w, file_error, "--out: ");
}

}  // namespace vitddp
