#include "src/app/preflight.h"

#include <algorithm>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "src/data/batch_feed.h"
#include "src/app/evaluation.h"
#include "src/io/output_path.h"
#include "src/app/rank_agreement.h"
#include "src/io/weights_io.h"

namespace vitddp {

namespace {

/// Check 1: the training split of --data idx:DIR (null for the other sources).
std::shared_ptr<const IdxDataset> checked_training_data(const Options& o, const World& w, const ParamLayout& layout) {
  std::shared_ptr<const IdxDataset> dataset = load_training_data(o);
  if (!dataset) return dataset;
  if (const std::string e = label_problem(*dataset, layout.cfg.num_classes); !e.empty()) throw std::runtime_error(e);
  if (dataset->count / w.world_size < o.batch_size)
    throw std::runtime_error(std::to_string(dataset->count) + " images are fewer than one batch of " +
                             std::to_string(o.batch_size) + " per rank: " + std::to_string(w.world_size) +
                             " rank(s) need at least " + std::to_string((int64_t)o.batch_size * w.world_size) +
                             " images ('" + dataset->images_path + "')");
  return dataset;
}

/// Check 3: --init-from's parameters (empty without it).
std::vector<float> checked_weights(const Options& o, const ParamLayout& layout) {
  std::vector<float> initial;
  if (!o.init_from.empty()) {
    initial.assign(layout.total, 0.0f);
    try {
      load_weights(o.init_from, layout, initial.data());
    } catch (const std::exception& e) {
      throw std::runtime_error("--init-from: " + std::string(e.what()));
    }
  }
  return initial;
}

/// Check 4 (continued): a fault injected at a step before the first of a resumed run would never
/// happen, and a test relying on it would pass without its fault.
std::string fault_step_problem(const Options& o, int start) {
  const std::pair<const char*, int> faults[] = {{"--debug-nan-at-step", o.debug_nan_at_step},
                                                {"--debug-fail-at-step", o.debug_fail_at_step}};
  for (const auto& [option, step] : faults)
    if (step >= 0 && step < start)
      return std::string(option) + " " + std::to_string(step) + ": has no effect: this run resumes at step " +
             std::to_string(start) + " (--resume)";
  return "";
}

}  // namespace

std::vector<OutputFile> run_outputs(const Options& o, int64_t first_step, const std::vector<InputFile>& inputs) {
  std::vector<OutputFile> out = {{"--out", o.out}, {"--save-weights", o.save_weights}, {"--trace", o.trace}};
  std::vector<std::string> planned = checkpoint_files(o, first_step);
  for (const std::string& f : planned) out.push_back({"--checkpoint-path", f, true});
  if (planned.empty()) return with_scratch_files(std::move(out));
  // A signal stop writes a checkpoint at any step of the run: the file of that step, where another
  // output or an input has the pattern's form, or where a file of that form already exists (those
  // named "--checkpoint-path (a signal stop at step s)").
  std::vector<std::pair<std::string, bool>> others = {{o.out, false}, {o.save_weights, false}, {o.trace, false}};
  for (const InputFile& in : inputs) others.push_back({in.path, false});
  for (const std::string& f : checkpoint_pattern_candidates(o.checkpoint_path)) others.push_back({f, true});
  for (const auto& [other, found] : others) {
    if (other.empty()) continue;
    const int64_t s = checkpoint_step_of(o.checkpoint_path, other);
    const std::string f = checkpoint_file(o.checkpoint_path, s);
    if (s > first_step && s <= o.total_steps() && std::find(planned.begin(), planned.end(), f) == planned.end()) {
      out.push_back({found ? "--checkpoint-path (a signal stop at step " + std::to_string(s) + ")" : "--checkpoint-path",
                     f, true});
      planned.push_back(f);
    }
  }
  return with_scratch_files(std::move(out));
}

std::vector<InputFile> run_inputs(const Options& o, const RunInputs& in) {
  std::vector<InputFile> inputs = {{"--init-from", o.init_from}, {"--resume", o.resume}};
  for (const auto* d : {in.dataset.get(), in.eval_data.get()})
    if (d) {
      inputs.push_back({"--data", d->images_path});
      inputs.push_back({"--data", d->labels_path});
    }
  return inputs;
}


bool preflight(const Options& o, const World& w, const ParamLayout& layout, RunInputs* in) {
  if (!agree_or_report(w, error_of([&] { in->dataset = checked_training_data(o, w, layout); }), "--data: "))
    return false;
  if (!agree_or_report(w, error_of([&] { in->eval_data = load_eval_data(o, in->dataset, layout.cfg.num_classes); })))
    return false;
  for (const auto& [option, path] : {std::pair<const char*, std::string>{"--init-from", o.init_from}, {"--resume", o.resume}})
    if (!agree_or_report(w, input_file_problem(option, path))) return false;
  if (!agree_or_report(w, error_of([&] { in->initial = checked_weights(o, layout); }))) return false;
  const std::string resume_error = error_of([&] {
    if (!o.resume.empty()) in->resume.emplace(read_resume_point(o, w, layout));
  });
  if (!agree_or_report(w, resume_error)) return false;
  if (!agree_or_report(w, fault_step_problem(o, in->start_step()))) return false;
  const std::vector<InputFile> inputs = run_inputs(o, *in);
  const std::vector<OutputFile> outputs = run_outputs(o, in->start_step(), inputs);
  if (!agree_or_report(w, output_paths_problem(outputs, inputs, o.overwrite))) return false;
  // Rank 0 writes every output: it alone tries creating them (other ranks' trials would see its files).
  if (!agree_or_report(w, w.rank == 0 ? output_creation_problem(outputs) : "")) return false;
  const std::string file_error = w.rank == 0 ? ResultsFile::create_trial_problem(o.out, o.overwrite) : "";
  return agree_or_report(w, file_error, "--out: ");
}

bool create_results_file(const Options& o, const World& w, RunInputs* in) {
  const std::string file_error = error_of([&] {
    if (w.rank == 0) in->results.emplace(ResultsFile::create(o.out, o.overwrite));
  });
  return agree_or_report(w, file_error, "--out: ");
}

}  // namespace vitddp
