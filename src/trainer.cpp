#include "src/trainer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <ctime>
#include <numeric>
#include <optional>
#include <utility>

#include "cuda/kernel_choice.h"
#include "cuda/nvtx.h"
#include "model/param_layout.h"
#include "mpi/buckets.h"
#include "src/batch_feed.h"
#include "src/checkpointer.h"
#include "src/build_info.h"
#include "src/chrome_trace.h"
#include "src/output_path.h"
#include "src/engine.h"
#include "src/gpu_model_options.h"
#include "src/h5_util.h"
#include "src/fault_injection.h"
#include "src/optimizer.h"
#include "src/evaluation.h"
#include "src/results_h5.h"
#include "src/run_guard.h"
#include "src/weights_io.h"

namespace vitddp {
namespace {

using Clock = std::chrono::steady_clock;

/// Scalars of a StepRecord, in the order of kStepSeries.
constexpr int kFloatSeries = 11;     // scalars of a row written as float64 series (kStepSeries)
constexpr int kNonfiniteIndex = 11;  // then the non-finite flag, written as training/nonfinite (int64)
constexpr int kScalars = 12;         // scalars per row, before the per-bucket values
struct SeriesSpec {
  const char* name;
  const char* units;
  const char* description;
};
const SeriesSpec kStepSeries[kFloatSeries] = {
    {"timing/data_wait", "s", "host time blocked waiting for the data source ('get batch')"},
    {"timing/input_wait", "s", "compute stream waiting for the batch's host-to-device copy"},
    {"timing/forward", "s", "forward pass and loss (CUDA events on the compute stream)"},
    {"timing/backward", "s", "backward compute; the all-reduces it overlaps run meanwhile on the comm stream"},
    {"timing/exposed_comm", "s", "after backward compute, time the compute stream waited for the last all-reduce"},
    {"timing/optimizer", "s", "optimizer step (SGD or AdamW) over the flat parameter buffer"},
    {"timing/step_time", "s", "device time of the step, step-start event to step-end event"},
    {"timing/wall_time", "s", "host wall time of the step, get batch to step end"},
    {"training/loss", "1", "this rank's mean cross-entropy of the step (mean over micro-steps)"},
    {"timing/step_start", "s", "step-start event, from the first step's start event on the same rank"},
    {"timing/backward_end", "s", "end of backward compute (last micro-step), from the step-start event"},
};

/// Per-bucket values of a row, after the scalars: kBucketArrays arrays of nb values each.
struct BucketSeriesSpec {
  const char* name;
  const char* units;
  const char* description;
  bool integer;
};
constexpr int kBucketArrays = 7;
const BucketSeriesSpec kBucketSeries[kBucketArrays] = {
    {"buckets/allreduce_start", "s", "start of the bucket's communication work on the comm stream, from the step-start event", false},
    {"buckets/allreduce_end", "s", "end of the bucket's communication work on the comm stream, from the step-start event", false},
    {"buckets/bytes_sent", "bytes", "payload bytes of this rank's all-reduce calls for the bucket (fp32 numel*4; fp16/bf16 numel*2; PowerSGD uncompressed + P + Q)", true},
    {"buckets/compressed", "1", "1 if the bucket's payload was compressed this step (fp16/bf16; PowerSGD from its start step)", true},
    {"buckets/compress_time", "s", "compression + decompression work of the bucket (comm stream)", false},
    {"buckets/allreduce_time", "s", "time inside the bucket's all-reduce calls (summed)", false},
    {"buckets/copy_time", "s", "gradient <-> bucket buffer copies (--grad-as-bucket-view off; 0 otherwise)", false},
};

std::vector<double> pack(const StepRecord& r, size_t nb) {
  std::vector<double> v = {r.data_wait_ms / 1e3, r.input_wait_ms / 1e3, r.forward_ms / 1e3,
                           r.backward_ms / 1e3,  r.exposed_comm_ms / 1e3, r.optimizer_ms / 1e3,
                           r.step_ms / 1e3,      r.wall_ms / 1e3,         r.loss,
                           r.start_ms / 1e3,     r.backward_end_ms / 1e3, r.nonfinite ? 1.0 : 0.0};
  const BucketTimes& t = r.buckets;
  auto put = [&](auto const& vec, double scale) {
    for (size_t b = 0; b < nb; ++b) v.push_back(b < vec.size() ? (double)vec[b] * scale : 0.0);
  };
  put(t.start_ms, 1e-3);
  put(t.end_ms, 1e-3);
  put(t.bytes_sent, 1.0);
  put(t.compressed, 1.0);
  put(t.compress_ms, 1e-3);
  put(t.allreduce_ms, 1e-3);
  put(t.copy_ms, 1e-3);
  return v;
}

/// Gathers a fixed-size string from every rank to rank 0.
std::vector<std::string> gather_strings(const std::string& s, const World& w) {
  constexpr int kLen = 256;
  char buf[kLen] = {0};
  std::strncpy(buf, s.c_str(), kLen - 1);
  std::vector<char> all(w.rank == 0 ? (size_t)kLen * w.world_size : 0);
  MPI_CHECK(MPI_Gather(buf, kLen, MPI_CHAR, all.data(), kLen, MPI_CHAR, 0, MPI_COMM_WORLD));
  std::vector<std::string> out;
  for (int r = 0; w.rank == 0 && r < w.world_size; ++r) out.emplace_back(&all[(size_t)r * kLen]);
  return out;
}

std::string mpi_library_version() {
  char v[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  MPI_Get_library_version(v, &len);
  std::string s(v);
  const size_t nl = s.find_first_of("\n,");
  return nl == std::string::npos ? s : s.substr(0, nl);
}

/// Adds step `step` of one rank (a gathered row: kScalars values, bucket starts, bucket ends, in
/// seconds) to the trace: compute-stream phases laid end to end from the step start, each
/// bucket's all-reduce on the comm stream, the host's wait for data.
void add_to_trace(ChromeTrace& t, int rank, int step, const double* row, size_t nb) {
  const double start = row[9] * 1e3, input = row[1] * 1e3, fwd = row[2] * 1e3, bwd_end = row[10] * 1e3;
  t.add(rank, ChromeTrace::Steps, "Batch " + std::to_string(step), start, row[6] * 1e3);
  t.add(rank, ChromeTrace::Compute, "input wait", start, input);
  t.add(rank, ChromeTrace::Compute, "forward", start + input, fwd);
  t.add(rank, ChromeTrace::Compute, "backward", start + input + fwd, bwd_end - input - fwd);
  t.add(rank, ChromeTrace::Compute, "exposed comm", start + bwd_end, row[4] * 1e3);
  t.add(rank, ChromeTrace::Compute, "optimizer step", start + bwd_end + row[4] * 1e3, row[5] * 1e3);
  t.add(rank, ChromeTrace::HostData, "get batch (wait)", start - row[0] * 1e3, row[0] * 1e3);
  for (size_t b = 0; b < nb; ++b) {
    const double s = row[kScalars + b] * 1e3, e = row[kScalars + nb + b] * 1e3;
    t.add(rank, ChromeTrace::Comm, "all-reduce bucket " + std::to_string(b), start + s, e - s);
  }
}

const char* phase_of(int step, const Options& o) {
  if (step < o.warmup_steps) return "warm-up";
  if (step < o.warmup_steps + o.steps) return "timed";
  return "cool-down";
}

/// Rank 0: creates the results file and writes the configuration. Returns "" or the error.
void write_header(ResultsFile& f, const Options& o, const World& w, const ParamLayout& layout,
                  const std::vector<Bucket>& buckets, const EngineInfo& info, const std::string& cmd,
                  const std::vector<std::string>& hosts, const std::vector<std::string>& devices,
                  const std::vector<std::string>& uuids) {
  f.set_attr("program", "vitddp");
  f.set_attr("git_commit", vitddp_git_commit());
  f.set_attr("command_line", cmd);
  f.set_attr("start_time", h5::utc_now_iso8601());
  f.set_attr("model", layout.cfg.name);
  f.set_attr("parameter_count", (int64_t)layout.parameter_count());
  f.set_attr("world_size", (int64_t)w.world_size);
  f.set_attr("batch_size", (int64_t)o.batch_size);
  f.set_attr("global_batch_size", (int64_t)o.batch_size * w.world_size);
  f.set_attr("backend", info.backend);
  f.set_attr("precision", to_string(o.precision));
  // What --attention / --patch-embed resolved to ("auto" is chosen by measurement, cuda/kernel_choice.h).
  const bool gpu = info.backend == "gpu";
  const GpuViTOptions mo = gpu ? gpu_model_options(o, layout) : GpuViTOptions();
  f.set_attr("attention", gpu ? attention_impl_name(mo.attention) : "cpu reference");
  f.set_attr("patch_embed", gpu ? patch_embed_impl_name(mo.patch_embed) : "cpu reference");
  f.set_attr("ddp", (int64_t)o.ddp);
  f.set_attr("overlap", (int64_t)o.overlap);
  f.set_attr("gradient_as_bucket_view", (int64_t)(o.grad_as_bucket_view ? 1 : 0));
  f.set_attr("compression", to_string(o.compression));
  f.set_attr("optimizer", to_string(o.optimizer));
  f.set_attr("num_buckets", (int64_t)buckets.size());
  f.set_attr("forward_flops_per_image", forward_flops_per_image(layout.cfg));
  f.set_attr("versions", info.versions + ", MPI: " + mpi_library_version());
  f.set_attr("hostnames", hosts);
  f.set_attr("device_names", devices);
  f.set_attr("device_uuids", uuids);
  for (const auto& [k, v] : option_values(o)) f.set_attr("option." + k, v);

  std::vector<int64_t> bytes, ntensors, offsets;
  std::vector<std::string> first, last;
  for (const auto& b : buckets) {
    bytes.push_back((int64_t)b.bytes());
    offsets.push_back((int64_t)b.offset);
    ntensors.push_back((int64_t)b.params.size());
    first.push_back(layout.params[b.params.front()].name);
    last.push_back(layout.params[b.params.back()].name);
  }
  const std::vector<uint64_t> nb = {buckets.size()};
  f.write_array("buckets/bytes", nb, bytes.data(), "bytes", "size of each bucket as all-reduced (fp32)");
  f.write_array("buckets/offset", nb, offsets.data(), "elements", "first element of each bucket in the flat gradient buffer");
  f.write_array("buckets/num_tensors", nb, ntensors.data(), "1", "parameter tensors in each bucket");
  f.write_strings("buckets/first_param", first, "", "first parameter of each bucket (gradient-ready order)");
  f.write_strings("buckets/last_param", last, "", "last parameter of each bucket (gradient-ready order)");

  const int64_t R = w.world_size, B = (int64_t)buckets.size();
  for (const auto& s : kStepSeries) f.create_series(s.name, s.units, s.description, R, 0, H5Dtype::f64);
  f.create_series("training/nonfinite", "1", "1 if the step's loss or averaged gradients held NaN/Inf (update not applied)", R, 0, H5Dtype::i64);
  for (const auto& s : kBucketSeries)
    f.create_series(s.name, s.units, s.description, R, B, s.integer ? H5Dtype::i64 : H5Dtype::f64);
  f.create_series("steps/timed", "1", "1 for the steps of the timed window, 0 for warm-up and cool-down", 1, 0, H5Dtype::i64);
  f.create_series("training/lr", "1", "learning rate of the step's optimizer update (--lr-schedule; also for a skipped step)", 1, 0, H5Dtype::f64);
  f.flush();
}

/// Rank 0: when an exception leaves run_training (an error on this rank; main then MPI_Aborts the
/// job), records stop_reason and steps_completed in the results file before its destructor closes
/// it, so the file says how it ended. Declared after the file, so it acts first.
class ErrorMark {
 public:
  ErrorMark(std::optional<ResultsFile>& file, const int& steps_done)
      : file_(file), steps_done_(steps_done), uncaught_(std::uncaught_exceptions()) {}
  ~ErrorMark() {
    if (std::uncaught_exceptions() <= uncaught_ || !file_ || !file_->is_open()) return;
    try {
      file_->set_attr("stop_reason", "error on rank 0 after step " + std::to_string(steps_done_) + " (see the log)");
      file_->set_attr("steps_completed", (int64_t)steps_done_);
    } catch (...) {  // the file is closed by its destructor anyway
    }
  }
  ErrorMark(const ErrorMark&) = delete;
  ErrorMark& operator=(const ErrorMark&) = delete;

 private:
  std::optional<ResultsFile>& file_;
  const int& steps_done_;
  const int uncaught_;
};

}  // namespace

int run_training(const Options& o, const World& w, const std::string& cmd) {
  const ParamLayout layout = make_param_layout(vit_config(o.model, o.num_classes));
  const std::vector<Bucket> buckets = assign_buckets(layout, (size_t)(o.first_bucket_mb * 1048576.0),
                                                     (size_t)(o.bucket_cap_mb * 1048576.0));
  // Every rank must hold the same bucket layout, or all-reduces would mix unrelated gradients.
  if (!all_ranks_equal(bucket_fingerprint(buckets))) throw std::runtime_error("ranks disagree on the bucket layout (different options or model?)");

  // The data set is read and checked before any device work, so a bad one ends every rank with
  // exit code 2 and a message naming the file.
  std::shared_ptr<const IdxDataset> dataset;
  std::string data_error;
  try {
    dataset = load_training_data(o);
    if (dataset) {
      for (uint8_t label : dataset->labels)
        if (label >= layout.cfg.num_classes)
          throw std::runtime_error("label " + std::to_string(label) + " does not fit the model's " +
                                   std::to_string(layout.cfg.num_classes) + " classes (set --num-classes)");
      if (dataset->count / w.world_size < o.batch_size)
        throw std::runtime_error(std::to_string(dataset->count) + " images are fewer than one batch of " +
                                 std::to_string(o.batch_size) + " per rank");
    }
  } catch (const std::exception& e) {
    data_error = e.what();
  }
  if (!all_ranks_ok(data_error.empty())) {
    if (w.rank == 0) {
      std::fprintf(stderr, "vitddp: error: --data: %s\n", data_error.empty() ? "rejected on another rank" : data_error.c_str());
    }
    return 2;
  }
  // The --eval-every split (DIR/t10k-* for --eval-split test), read and checked as the training data.
  std::shared_ptr<const IdxDataset> eval_data;
  std::string eval_error;
  try {
    eval_data = load_eval_data(o, dataset, layout.cfg.num_classes);
  } catch (const std::exception& e) {
    eval_error = e.what();
  }
  if (!all_ranks_ok(eval_error.empty())) {
    if (w.rank == 0)
      std::fprintf(stderr, "vitddp: error: %s\n", eval_error.empty() ? "--eval-split: rejected on another rank" : eval_error.c_str());
    return 2;
  }
  // --init-from is read (and checked by name and shape) on every rank before any device work;
  // --save-weights' and --trace's paths are checked now so a long run does not fail at its end.
  std::vector<float> initial;
  std::string weights_error;
  try {
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
    if (!o.trace.empty())
      if (const std::string e = output_directory_problem("--trace", o.trace); !e.empty()) throw std::runtime_error(e);
  } catch (const std::exception& e) {
    weights_error = e.what();
  }
  if (!all_ranks_ok(weights_error.empty())) {
    if (w.rank == 0)
      std::fprintf(stderr, "vitddp: error: %s\n", weights_error.empty() ? "--init-from: rejected on another rank" : weights_error.c_str());
    return 2;
  }

  // --resume: the checkpoint is read and checked on every rank before any device work; so is
  // --checkpoint-path (on rank 0, which writes it).
  std::optional<ResumePoint> resume;
  std::string resume_error;
  try {
    if (!o.resume.empty()) resume.emplace(read_resume_point(o, w, layout));
    if (w.rank == 0) resume_error = checkpoint_path_problem(o, resume ? resume->header.step : 0);
  } catch (const std::exception& e) {
    resume_error = e.what();
  }
  if (!all_ranks_ok(resume_error.empty())) {
    if (w.rank == 0)
      std::fprintf(stderr, "vitddp: error: %s\n", resume_error.empty() ? "--resume: rejected on another rank" : resume_error.c_str());
    else if (!resume_error.empty() && resume_error.rfind("--resume: checkpoint", 0) == 0)
      std::fprintf(stderr, "[vitddp rank %d] error: %s\n", w.rank, resume_error.c_str());  // this rank's own data position
    return 2;
  }
  const int start = resume ? (int)resume->header.step : 0;  // first step of this run (0-based)

  // Rank 0 owns the results file; it is created before any device work so a bad path fails fast.
  std::optional<ResultsFile> results;
  std::string file_error;
  if (w.rank == 0) {
    try {
      results.emplace(ResultsFile::create(o.out, o.overwrite));
    } catch (const std::exception& e) {
      file_error = e.what();
    }
  }
  if (!all_ranks_ok(file_error.empty())) {
    if (w.rank == 0) std::fprintf(stderr, "vitddp: error: --out: %s\n", file_error.c_str());
    return 2;
  }

  if (w.rank == 0)
    std::printf("[vitddp] %s (%zu parameters), %d rank(s), backend %s, batch %d per rank, %zu bucket(s)%s\n",
                layout.cfg.name.c_str(), layout.parameter_count(), w.world_size, to_string(o.backend).c_str(), o.batch_size,
                buckets.size(), o.ddp ? "" : " (no DDP)");
  std::unique_ptr<Engine> engine;
  int64_t resumed_updates = 0;  // optimizer updates the checkpoint had applied
  try {
    const std::vector<float>* init = resume ? &resume->state.params : initial.empty() ? nullptr : &initial;
    engine = o.backend == Backend::Gpu ? make_gpu_engine(o, w, layout, buckets, init) : make_cpu_engine(o, w, layout, buckets, init);
    std::vector<float>().swap(initial);  // the engine holds its own copy now
    if (resume) {
      engine->load_train_state(resume->state);
      resumed_updates = resume->state.optimizer_steps;
      resume->state = TrainState{};  // the engine holds its own copy now
    }
  } catch (const EngineSetupError& e) {
    // Every rank got here together; the ranks that failed say why.
    if (*e.what()) std::fprintf(stderr, "[vitddp rank %d] error: %s\n", w.rank, e.what());
    if (w.rank == 0) {
      results.reset();
      std::remove(o.out.c_str());  // created above, holds no step
    }
    return 2;
  }
  const EngineInfo info = engine->info();
  const auto hosts = gather_strings(w.hostname, w);
  const auto devices = gather_strings(info.device_name, w);
  const auto uuids = gather_strings(info.device_uuid, w);
  if (w.rank == 0) {
    const std::string warning = powersgd_start_warning(o);
    if (!warning.empty()) std::printf("[vitddp] warning: %s\n", warning.c_str());
  }
  if (w.rank == 0) {
    write_header(*results, o, w, layout, buckets, info, cmd, hosts, devices, uuids);
    results->set_attr("resumed_from", o.resume);
    results->set_attr("resumed_from_step", (int64_t)start);
    results->flush();
    if (resume)
      std::printf("[vitddp] resuming from %s at step %d of %d (optimizer updates applied: %lld)\n", o.resume.c_str(),
                  start, o.total_steps(), (long long)resumed_updates);
  }
  std::fflush(stdout);

  const LrSchedule schedule = lr_schedule(o);
  const int k = o.grad_accum_steps;
  const int64_t first_batch = (int64_t)start * k;  // batches the completed steps consumed (all sources: pure in the index)
  BatchFeed feed(o, w, layout.cfg, *engine, dataset, first_batch);
  Checkpointer checkpointer(o, w, layout, vitddp_git_commit());
  std::unique_ptr<Evaluator> evaluator;
  if (eval_data) {
    evaluator = std::make_unique<Evaluator>(eval_data, layout.cfg, o.batch_size, w, *engine, results ? &*results : nullptr);
    if (w.rank == 0)
      std::printf("[vitddp] evaluation every %d step(s) and after the last on the %s split: %lld images, %lld on rank 0\n",
                  o.eval_every, to_string(o.eval_split).c_str(), (long long)eval_data->count, (long long)evaluator->shard().size());
  }
  double eval_in_window_s = 0;  // evaluation time inside the timed window, taken out of it
  const size_t nb = buckets.size();
  const int total = o.total_steps();
  std::vector<double> gathered(w.rank == 0 ? (size_t)w.world_size * (kScalars + kBucketArrays * nb) : 0);
  std::vector<double> timed_steps_ms;
  double window_s = 0, window_pause_s = 0;  // pause: checkpoints written inside the timed window
  Clock::time_point window_start;
  // The timed window of a resumed run is what is left of it after `start`.
  const int window_begin = std::max(o.warmup_steps, start), window_end = o.warmup_steps + o.steps;
  const int timed_count = std::max(0, window_end - window_begin);
  int64_t micro_batches = first_batch;  // index of the next batch taken from the data source
  double data_wait_next_ms = feed.stage_next(micro_batches++);  // first batch before the loop
  int late_buckets = 0, timed_buckets = 0;
  ChromeTrace trace;

  RunGuard guard(w.rank, o.step_timeout_s, [&engine]() { return engine->async_error(); });
  int nonfinite_steps = 0, steps_done = start, exit_code = 0;
  std::function<void()> pending_row;  // rank 0: the last step's results row, written during the next step
  std::string stop_reason = "completed";
  const ErrorMark error_mark(results, steps_done);
  const FaultInjection fault(o);  // --debug-fail-*: off unless asked

  // An error on this rank mid-run (a CUDA/NCCL error, an exception) must end every rank now: the
  // peers may be waiting inside this step's collectives, and unwinding would run destructors that
  // wait for the device (cudaDeviceSynchronize, cudaFree) and hence for those peers. So: one line,
  // rank 0 marks and closes its results file, MPI_Abort.
  try {
    for (int i = start; i < total; ++i) {
      if (i == o.debug_nan_at_step && w.rank == 0) engine->poison_staged_batch();
      if (i == window_begin && timed_count > 0) {
        engine->profiler(true);
        window_start = Clock::now();
      }
      const auto t0 = Clock::now();
      // The schedule advances with every step, skipped ones included (torch: scheduler.step() runs
      // even when GradScaler skips optimizer.step()).
      const double lr = schedule.lr_at(i);
      engine->set_lr(lr);
      StepRecord rec;
      double data_wait_ms = data_wait_next_ms;
      {
        NvtxRange batch_range("Batch " + std::to_string(i), NvtxColor::Blue);
        for (int j = 0; j < k; ++j) {
          engine->run_micro_step(j, k);
          // GPU: rank 0 writes the previous step's row while this step runs on the device (the
          // launch above returned at once); the row is pending only for that launch.
          if (j == 0 && pending_row) std::exchange(pending_row, nullptr)();
          // The next micro-batch is fetched and copied while this one runs on the device.
          const bool more = i + 1 < total || j + 1 < k;
          const double wait = more ? feed.stage_next(micro_batches++) : 0.0;
          if (j + 1 < k) data_wait_ms += wait;
          else data_wait_next_ms = wait;
        }
        if (fault.due(i, w.rank)) fault.trigger(*engine, w.rank, i);  // the step's collectives in flight
        engine->finish_step(&rec);
      }
      rec.data_wait_ms = data_wait_ms;
      rec.wall_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      if (i == window_end - 1 && timed_count > 0) {
        window_s = std::chrono::duration<double>(Clock::now() - window_start).count() - window_pause_s - eval_in_window_s;
        engine->profiler(false);
      }
      const bool timed = i >= o.warmup_steps && i < o.warmup_steps + o.steps;
      if (timed) {
        timed_steps_ms.push_back(rec.step_ms);
        const double bwd_end = rec.backward_end_ms;
        for (size_t b = 0; b < rec.buckets.start_ms.size(); ++b) {
          ++timed_buckets;
          if (rec.buckets.start_ms[b] >= bwd_end) ++late_buckets;
        }
      }

      guard.step_done(i);
      steps_done = i + 1;
      // One agreement per step: a signal on any rank, or a non-finite step on any rank, ends or marks
      // the step on every rank at once.
      int flags[2] = {guard.stop_signal(), rec.nonfinite ? 1 : 0}, any[2] = {0, 0};
      MPI_CHECK(MPI_Allreduce(flags, any, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
      if (any[1]) ++nonfinite_steps;

      const std::vector<double> row = pack(rec, nb);
      MPI_CHECK(MPI_Gather(row.data(), (int)row.size(), MPI_DOUBLE, gathered.data(), (int)row.size(), MPI_DOUBLE, 0,
                           MPI_COMM_WORLD));
      // Rank 0's results row (HDF5 appends, flush, trace, progress line: 0.15-0.25 ms of host time
      // per step). GPU backend: written right after the next step's launch, while the device runs
      // it, unless something happens after this step (checkpoint, evaluation, stop, the end): then
      // now, before that. CPU backend: now (its step runs on the host inside the launch call).
      if (w.rank == 0) {
        auto write_row = [&, i, timed, lr, rec, gathered] {
          const size_t stride = kScalars + kBucketArrays * nb;
          std::vector<double> col(w.world_size), bk((size_t)w.world_size * nb);
          for (int s = 0; s < kFloatSeries; ++s) {
            for (int r = 0; r < w.world_size; ++r) col[r] = gathered[r * stride + s];
            results->append_step(kStepSeries[s].name, col);
          }
          for (int which = 0; which < kBucketArrays; ++which) {
            for (int r = 0; r < w.world_size; ++r)
              for (size_t b = 0; b < nb; ++b) bk[r * nb + b] = gathered[r * stride + kScalars + which * nb + b];
            if (kBucketSeries[which].integer) {
              results->append_step(kBucketSeries[which].name, std::vector<int64_t>(bk.begin(), bk.end()));
            } else {
              results->append_step(kBucketSeries[which].name, bk);
            }
          }
          results->append_step("steps/timed", std::vector<int64_t>{timed ? 1 : 0});
          results->append_step("training/lr", std::vector<double>{lr});
          std::vector<int64_t> nf(w.world_size);
          for (int r = 0; r < w.world_size; ++r) nf[r] = gathered[r * stride + kNonfiniteIndex] != 0;
          results->append_step("training/nonfinite", nf);
          if (!o.trace.empty())
            for (int r = 0; r < w.world_size; ++r) add_to_trace(trace, r, i, &gathered[r * stride], nb);
          if ((i + 1) % o.flush_every == 0) results->flush();
          if ((i + 1) % o.progress_every == 0 || i + 1 == total)
            std::printf("[vitddp] step %d/%d (%s) loss %.4f lr %.3g | step %.1f ms: fwd %.1f, bwd %.1f, exposed comm %.1f, opt %.1f, data wait %.1f\n",
                        i + 1, total, phase_of(i, o), rec.loss, lr, rec.step_ms, rec.forward_ms, rec.backward_ms,
                        rec.exposed_comm_ms, rec.optimizer_ms, rec.data_wait_ms);
          std::fflush(stdout);
        };
        const bool after_step = o.backend != Backend::Gpu || i + 1 == total || any[0] || any[1] ||
                                checkpointer.due(i + 1, i + 1 == total, any[0] != 0) ||
                                (evaluator && eval_due(o.eval_every, i + 1, total));
        if (after_step) write_row();
        else pending_row = write_row;
      }
      // Checkpoint after this step: every --checkpoint-every steps, at the end, on a signal stop;
      // never after a step that stops the run as non-finite.
      const bool nonfinite_stop = any[1] && o.on_nonfinite == NonfinitePolicy::Stop;
      if (!nonfinite_stop && checkpointer.due(i + 1, i + 1 == total, any[0] != 0)) {
        const auto c0 = Clock::now();
        const std::string err = checkpointer.write(*engine, i + 1, first_batch + (int64_t)(i + 1 - start) * k);
        const double took = std::chrono::duration<double>(Clock::now() - c0).count();
        guard.step_done(i);  // the watchdog measures steps: a checkpoint gets its own --step-timeout
        if (i >= window_begin && i + 1 < window_end) window_pause_s += took;  // not part of the timed window
        if (!err.empty()) {
          if (w.rank == 0) std::fprintf(stderr, "[vitddp] error: checkpoint after step %d: %s\n", i + 1, err.c_str());
          stop_reason = "checkpoint failed after step " + std::to_string(i + 1);
          exit_code = 1;
          break;
        }
        if (w.rank == 0) {
          std::printf("[vitddp] checkpoint after step %d written to %s (%.2f s)\n", i + 1,
                      checkpointer.last_file().c_str(), took);
          std::fflush(stdout);
        }
      }
      if (any[1]) {
        if (w.rank == 0)
          std::fprintf(stderr, "[vitddp] step %d: non-finite loss or gradients (NaN/Inf); the update was not applied%s\n",
                       i + 1, o.on_nonfinite == NonfinitePolicy::Stop ? ": stopping (--on-nonfinite stop)" : ", going on (--on-nonfinite skip)");
        if (o.on_nonfinite == NonfinitePolicy::Stop) {
          stop_reason = "non-finite loss or gradients at step " + std::to_string(i + 1);
          exit_code = 4;
          break;
        }
      }
      if (any[0]) {
        stop_reason = "signal " + std::to_string(any[0]) + " after step " + std::to_string(i + 1);
        exit_code = 128 + any[0];
        if (w.rank == 0) std::fprintf(stderr, "[vitddp] stopping after step %d on signal %d\n", i + 1, any[0]);
        break;
      }
      if (evaluator && eval_due(o.eval_every, i + 1, total)) {
        // Between steps: the next batch is already staged and stays so; not part of any step's timing.
        double eval_s = 0;
        guard.step_done(i);  // the evaluation gets its own --step-timeout
        evaluator->run(i + 1, &eval_s);
        if (i >= window_begin && i + 1 < window_end) eval_in_window_s += eval_s;  // timed, not the last
        guard.step_done(i);  // the watchdog measures steps, not evaluations
      }
    }
  } catch (const std::exception& e) {
    if (w.rank == 0 && results && results->is_open()) {
      try {
        if (pending_row) std::exchange(pending_row, nullptr)();  // the last completed step's row
        results->set_attr("stop_reason", "error on rank 0 after step " + std::to_string(steps_done) + " (see the log)");
        results->set_attr("steps_completed", (int64_t)steps_done);
        results->close();
      } catch (...) {  // the rows already flushed stay readable
      }
    }
    abort_all(w, e.what(), 1);
  }
  if (pending_row) std::exchange(pending_row, nullptr)();  // (every exit above writes it; kept as a guard)
  const bool window_complete = steps_done >= window_end && timed_count > 0;
  if (!o.save_weights.empty() && w.rank == 0) {
    // All replicas are identical (same start, same averaged gradients): rank 0's are the model's.
    save_weights(o.save_weights, layout, engine->parameters().data(), o.overwrite);
    std::printf("[vitddp] weights after %d step%s written to %s\n", steps_done, steps_done == 1 ? "" : "s",
                o.save_weights.c_str());
  }

  const auto transports = gather_strings(engine->nccl_transport(), w);
  if (w.rank == 0) {
    results->set_attr("nccl_transport", transports);
    std::printf("[vitddp] NCCL transport: %s\n", transports[0].c_str());
    results->set_attr("stop_reason", stop_reason);
    results->set_attr("steps_completed", (int64_t)steps_done);
    if (checkpointer.enabled()) {
      results->set_attr("checkpoint_steps", std::vector<int64_t>(checkpointer.written_steps()));
      results->set_attr("last_checkpoint", checkpointer.last_file());
    }
    results->write_summary("nonfinite_steps", nonfinite_steps, "1", "steps whose loss or gradients held NaN/Inf (not applied)");
    if (!window_complete) {
      results->close();
      if (stop_reason == "completed")
        std::printf("[vitddp] resumed after the timed window: no timing summary; results written to %s\n", o.out.c_str());
      else
        std::printf("[vitddp] run ended early (%s) after %d of %d steps; results written to %s\n", stop_reason.c_str(),
                    steps_done, total, o.out.c_str());
      return exit_code;
    }
    const double sps = timed_count / window_s;
    const double img_rank = sps * o.batch_size;
    const double tflops = 3.0 * forward_flops_per_image(layout.cfg) * img_rank / 1e12;
    std::vector<double> sorted = timed_steps_ms;
    std::sort(sorted.begin(), sorted.end());
    const double median_ms = sorted[sorted.size() / 2];
    results->write_summary("steps_per_second", sps, "steps/s", "timed steps / host wall time of the timed window (rank 0)");
    results->write_summary("images_per_second_per_rank", img_rank, "images/s", "steps_per_second x batch_size");
    results->write_summary("images_per_second", img_rank * w.world_size, "images/s", "all ranks together");
    results->write_summary("tflops_per_rank", tflops, "TFLOP/s", "3 x forward FLOPs x images per second per rank");
    results->write_summary("median_step_time", median_ms / 1e3, "s", "median device step time of the timed window (rank 0)");
    results->write_summary("timed_window", window_s, "s", "host wall time of the timed window (rank 0)");
    results->write_summary("buckets_started_after_backward", late_buckets, "1",
                          "bucket all-reduces of the timed window (rank 0) that started after backward compute ended");
    results->write_summary("buckets_timed", timed_buckets, "1", "bucket all-reduces in the timed window (rank 0)");
    results->close();
    if (!o.trace.empty()) {
      trace.write(o.trace, w.world_size);
      std::printf("[vitddp] Chrome trace (%zu events) written to %s\n", trace.size(), o.trace.c_str());
    }
    std::printf("[vitddp] timed window: %d step%s in %.3f s: %.2f steps/s per rank, %.1f images/s per rank, "
                "%.1f images/s total, %.4g TFLOP/s per rank; median step %.1f ms\n",
                timed_count, timed_count == 1 ? "" : "s", window_s, sps, img_rank, img_rank * w.world_size, tflops,
                median_ms);
    if (o.ddp && w.world_size > 1)
      std::printf("[vitddp] %d of %d bucket all-reduces started after backward compute ended\n", late_buckets,
                  timed_buckets);
    std::printf("[vitddp] results written to %s\n", o.out.c_str());
  }
  return exit_code;
}

}  // namespace vitddp
