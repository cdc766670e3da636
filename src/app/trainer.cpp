#include "src/app/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <utility>

#include "model/grad_ready.h"
#include "model/kernel_choice.h"
#include "src/io/nvtx.h"
#include "model/param_layout.h"
#include "mpi/buckets/buckets.h"
#include "src/data/batch_feed.h"
#include "src/app/build_info.h"
#include "src/io/checkpointer.h"
#include "src/io/chrome_trace.h"
#include "src/engines/engine.h"
#include "src/app/evaluation.h"
#include "src/app/fault_injection.h"
#include "src/engines/gpu_model_options.h"
#include "src/io/h5_util.h"
#include "src/engines/optimizer.h"
#include "src/app/preflight.h"
#include "src/app/rank_agreement.h"
#include "src/io/results_h5.h"
#include "src/io/series.h"
#include "src/app/stop_control.h"
#include "src/app/timed_window.h"
#include "src/engines/topology.h"
#include "src/io/weights_io.h"

namespace vitddp {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

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

/// The collectives a run's buckets go through on `world_size` ranks: "all-reduce" (DDP),
/// "reduce-scatter + all-gather (ZeRO-1)" (--shard-optimizer, fp32 parameters gathered),
/// "reduce-scatter + bf16 all-gather (ZeRO-1)" (the bf16 all-gather, allgather_in_bf16),
/// "none (no DDP)".
std::string collectives(const Options& o, int world_size) {
  if (!o.ddp) return "none (no DDP)";
  if (!o.shard_optimizer) return "all-reduce";
  return allgather_in_bf16(o, world_size) ? "reduce-scatter + bf16 all-gather (ZeRO-1)"
                                          : "reduce-scatter + all-gather (ZeRO-1)";
}

/// The gradient-ready groups the run records per step: grad_ready_groups(layout) with
/// --record-grad-ready, else none (0).
size_t recorded_groups(const Options& o, const ParamLayout& layout) {
  return o.record_grad_ready ? grad_ready_groups(layout).size() : 0;
}

/// Rank 0, --record-grad-ready: the table of the gradient-ready groups (grad_ready_groups order,
/// the index of grad_ready/ready_time's group axis), beside the bucket table: each group's fp32
/// bytes (layout padding included: they sum to layout.total x 4), the flat-buffer prefix complete
/// once it is reported (grad_ready_prefix_elements, in bytes), its tensors and its first and last
/// parameter as reported.
void write_grad_ready_table(ResultsFile& f, const ParamLayout& layout) {
  std::vector<int64_t> bytes, prefix, ntensors;
  std::vector<std::string> first, last;
  for (const std::vector<size_t>& g : grad_ready_groups(layout)) {
    size_t elems = 0;
    for (size_t p : g) elems += (layout.params[p].numel + 3) / 4 * 4;  // make_param_layout's alignment
    bytes.push_back((int64_t)(elems * sizeof(float)));
    ntensors.push_back((int64_t)g.size());
    first.push_back(layout.params[g.front()].name);
    last.push_back(layout.params[g.back()].name);
  }
  for (size_t e : grad_ready_prefix_elements(layout)) prefix.push_back((int64_t)(e * sizeof(float)));
  const std::vector<uint64_t> n = {bytes.size()};
  f.write_array("grad_ready/bytes", n, bytes.data(), "bytes",
                "fp32 bytes of each gradient-ready group's tensors (layout padding included)");
  f.write_array("grad_ready/prefix_bytes", n, prefix.data(), "bytes",
                "fp32 bytes of the longest prefix of the flat gradient buffer complete once the group is reported");
  f.write_array("grad_ready/num_tensors", n, ntensors.data(), "1", "parameter tensors in each gradient-ready group");
  f.write_strings("grad_ready/first_param", first, "", "first parameter of each gradient-ready group, as reported");
  f.write_strings("grad_ready/last_param", last, "", "last parameter of each gradient-ready group, as reported");
}

/// Rank 0: writes the configuration, the bucket tables and the empty step series to the new file.
void write_header(ResultsFile& f, const Options& o, const World& w, const ParamLayout& layout,
                  const std::vector<Bucket>& buckets, const EngineInfo& info, const std::string& cmd,
                  const std::vector<std::string>& hosts, const std::vector<std::string>& devices,
                  const std::vector<std::string>& uuids) {
  f.set_attr("program", "vitddp");
  f.set_attr("git_commit", vitddp_git_commit());
  f.set_attr("command_line", cmd);
  f.set_attr("start_time", h5::utc_now_iso8601());
  f.set_attr("step_numbering", "0-based");  // docs/schema.md, Conventions
  f.set_attr("model", layout.cfg.name);
  f.set_attr("parameter_count", (int64_t)layout.parameter_count());
  f.set_attr("world_size", (int64_t)w.world_size);
  f.set_attr("batch_size", (int64_t)o.batch_size);
  // Images per optimizer step over all ranks: every rank's K micro-batches (--grad-accum-steps K).
  f.set_attr("global_batch_size", (int64_t)o.batch_size * o.grad_accum_steps * w.world_size);
  f.set_attr("backend", info.backend);
  f.set_attr("precision", to_string(o.precision));
  // What --attention / --patch-embed resolved to ("auto" is chosen by measurement, model/kernel_choice.h).
  const bool gpu = info.backend == "gpu";
  const GpuViTOptions mo = gpu ? gpu_model_options(o, layout) : GpuViTOptions();
  f.set_attr("attention", gpu ? attention_impl_name(mo.attention) : "cpu reference");
  f.set_attr("patch_embed", gpu ? patch_embed_impl_name(mo.patch_embed) : "cpu reference");
  f.set_attr("recompute_gelu", gpu ? (mo.recompute_gelu ? "on" : "off") : "cpu reference");
  f.set_attr("ddp", (int64_t)o.ddp);
  f.set_attr("overlap", (int64_t)o.overlap);
  f.set_attr("gradient_as_bucket_view", (int64_t)(o.grad_as_bucket_view ? 1 : 0));
  f.set_attr("compression", to_string(o.compression));
  f.set_attr("collectives", collectives(o, w.world_size));
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

  if (o.record_grad_ready) write_grad_ready_table(f, layout);

  create_step_series(f, w.world_size, (int64_t)buckets.size(), (int64_t)recorded_groups(o, layout));
  f.flush();
}

/// The results file's stop_reason after an error on rank 0 with `steps_done` steps of the run
/// completed (steps 0 .. steps_done - 1).
std::string error_reason(int steps_done) {
  return (steps_done > 0 ? "error on rank 0 after step " + std::to_string(steps_done - 1) : std::string("error on rank 0 in step 0")) +
         " (see the log)";
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
      file_->set_attr("stop_reason", error_reason(steps_done_));
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

/// Builds this rank's engine from the start-up inputs: --resume's parameters and optimizer state,
/// or --init-from's parameters (both released once the engine holds its own copy). Null after an
/// EngineSetupError, which every rank gets together: rank 0 prints one line with the lowest failing
/// rank's reason (agree_or_report). No results file exists yet (create_results_file comes after).
std::unique_ptr<Engine> start_engine(const Options& o, const World& w, const ParamLayout& layout,
                                     const std::vector<Bucket>& buckets, RunInputs& in, int64_t* resumed_updates) {
  std::unique_ptr<Engine> engine;
  try {
    const std::vector<float>* init = in.resume ? &in.resume->state.params : in.initial.empty() ? nullptr : &in.initial;
    engine = o.backend == Backend::Gpu ? make_gpu_engine(o, w, layout, buckets, init) : make_cpu_engine(o, w, layout, buckets, init);
    std::vector<float>().swap(in.initial);  // the engine holds its own copy now
    if (in.resume) {
      engine->load_train_state(in.resume->state);
      *resumed_updates = in.resume->state.optimizer_steps;
      in.resume->state = TrainState{};  // the engine holds its own copy now
    }
  } catch (const EngineSetupError& e) {
    // Ranks that were fine carry "" (they failed because another rank did).
    if (agree_or_report(w, e.what()) && w.rank == 0)
      std::fprintf(stderr, "vitddp: error: the %s backend could not be set up\n", to_string(o.backend).c_str());
    return nullptr;
  }
  return engine;
}

/// Seconds between two time-based progress lines (--progress-every auto).
constexpr double kProgressSeconds = 5.0;

/// Each step's results row: every rank's StepRow is gathered to rank 0 (MPI_Gather), which
/// appends it to the results file (append_step_series), adds it to the Chrome trace (--trace),
/// flushes every --flush-every steps and prints the progress line: with --progress-every N after
/// every N-th step and the last; with auto (0) after this run's first step, whenever
/// kProgressSeconds of wall time passed since the previous line, and after the last. A row is
/// written at once or deferred to write_pending(): the GPU backend writes it during the next step,
/// right after that step's launch, while the device runs it (0.15-0.25 ms of host time per step).
/// Rank 0 also keeps, per timed step, the step's busbw over all ranks (step_busbw_gbps).
class StepRows {
 public:
  /// `first_step`: this run's first step (0-based); `groups`: recorded_groups.
  StepRows(const Options& o, const World& w, size_t buckets, size_t groups, ResultsFile* results,
           const TimedWindow& window, int first_step)
      : o_(o), w_(w), row_(buckets, groups), results_(results), window_(window), first_step_(first_step),
        gathered_(w.rank == 0 ? (size_t)w.world_size * row_.size() : 0) {}

  /// Starts the progress clock (the step loop begins).
  void start_clock() { loop_start_ = last_line_ = Clock::now(); }

  /// Collective: gathers this rank's `rec` of step ctx.step; rank 0 writes it now or, with
  /// `defer`, at the next write_pending().
  void gather(const StepRecord& rec, const StepContext& ctx, bool defer) {
    const std::vector<double> row = row_.pack(rec);
    MPI_CHECK(MPI_Gather(row.data(), (int)row.size(), MPI_DOUBLE, gathered_.data(), (int)row.size(), MPI_DOUBLE, 0,
                         MPI_COMM_WORLD));
    if (w_.rank != 0) return;
    pending_ = Pending{rec, ctx, gathered_, Clock::now()};
    if (!defer) write_pending();
  }

  /// Rank 0: writes the deferred row, if any (no-op elsewhere).
  void write_pending() {
    if (!pending_) return;
    const Pending p = std::move(*pending_);
    pending_.reset();
    const int i = p.ctx.step;
    append_step_series(*results_, p.rows.data(), w_.world_size, row_.buckets(), p.ctx, row_.groups());
    if (p.ctx.timed && row_.buckets() > 0 && w_.world_size > 1)
      timed_busbw_.push_back(step_busbw_gbps(p.rows.data(), w_.world_size, row_.buckets(), row_.groups()));
    if (!o_.trace.empty())
      for (int r = 0; r < w_.world_size; ++r) trace_.add_step(r, i, row_.unpack(&p.rows[(size_t)r * row_.size()]));
    if ((i + 1) % o_.flush_every == 0) results_->flush();
    if (progress_due(i, p.done_at)) print_progress(p);
    std::fflush(stdout);
  }

  const ChromeTrace& trace() const { return trace_; }
  /// Rank 0: step_busbw_gbps of every timed step written so far (GB/s; NaN for a step without
  /// recorded all-reduce time); empty for one rank (no bus) or no buckets.
  const std::vector<double>& timed_busbw() const { return timed_busbw_; }

 private:
  struct Pending {
    StepRecord rec;            // rank 0's own record (the progress line)
    StepContext ctx;
    std::vector<double> rows;  // every rank's packed row
    Clock::time_point done_at;  // when rank 0 gathered it
  };

  bool progress_due(int i, Clock::time_point done_at) const {
    if (i + 1 == o_.total_steps()) return true;
    if (o_.progress_every > 0) return (i + 1) % o_.progress_every == 0;
    return i == first_step_ || std::chrono::duration<double>(done_at - last_line_).count() >= kProgressSeconds;
  }

  void print_progress(const Pending& p) {
    const int i = p.ctx.step, this_run = i + 1 - first_step_;
    Progress g;
    g.done = i + 1;
    g.elapsed_s = std::chrono::duration<double>(p.done_at - loop_start_).count();
    g.eta_s = g.elapsed_s / this_run * (o_.total_steps() - g.done);
    const double since = std::chrono::duration<double>(p.done_at - last_line_).count();
    g.steps_per_s = since > 0 ? (g.done - last_line_done_) / since : 0;
    g.images_per_s = g.steps_per_s * o_.batch_size * o_.grad_accum_steps * w_.world_size;
    std::printf("%s\n", progress_line(p.rec, p.ctx, o_.total_steps(), window_.phase(i), g).c_str());
    last_line_ = p.done_at;
    last_line_done_ = g.done;
  }

  const Options& o_;
  const World& w_;
  const StepRow row_;
  ResultsFile* results_;
  const TimedWindow& window_;
  const int first_step_;
  std::vector<double> gathered_;
  std::optional<Pending> pending_;
  ChromeTrace trace_;
  std::vector<double> timed_busbw_;
  Clock::time_point loop_start_ = Clock::now(), last_line_ = loop_start_;
  int last_line_done_ = first_step_;  // steps done at the previous progress line
};

/// A run after start-up: the data feed, checkpoints, evaluation, timed window, stop decision and
/// results rows of one rank, and the step loop over steps [start, total).
class Run {
 public:
  /// `buckets`: the number of gradient buckets (the per-bucket series' length).
  Run(const Options& o, const World& w, const ParamLayout& layout, size_t buckets, Engine& engine, RunInputs& in)
      : o_(o), w_(w), engine_(engine), results_(in.results ? &*in.results : nullptr),
        start_(in.start_step()), total_(o.total_steps()), k_(o.grad_accum_steps),
        first_batch_((int64_t)start_ * k_),  // batches the completed steps consumed (every source: pure in the index)
        schedule_(lr_schedule(o)),
        trace_clock_(o.trace.empty() ? TraceClock() : TraceClock::start(w)),  // before the first batch
        feed_(o, w, layout.cfg, engine, in.dataset, first_batch_),
        checkpointer_(o, w, layout, vitddp_git_commit()),
        evaluator_(in.eval_data ? std::make_unique<Evaluator>(in.eval_data, layout.cfg, o.batch_size, w, engine, results_)
                                : nullptr),
        window_(o.warmup_steps, o.steps, start_, [&engine](bool on) { engine.diagnostics().profiler(on); }),
        micro_batches_(first_batch_),
        data_wait_next_ms_(feed_.stage_next(micro_batches_++)),  // the first batch, before the loop
        rows_(o, w, buckets, recorded_groups(o, layout), results_, window_, start_),
        stop_(w, o.step_timeout_s, [&engine]() { return engine.diagnostics().async_error(); }, o.on_nonfinite == NonfinitePolicy::Stop),
        defer_rows_(o.backend == Backend::Gpu),
        steps_done_(start_),
        fault_(o) {}

  /// The step loop. An error on this rank mid-run (a CUDA/NCCL error, an exception) ends every
  /// rank now: the peers may be waiting inside this step's collectives, and unwinding would run
  /// destructors that wait for the device (cudaDeviceSynchronize, cudaFree) and hence for those
  /// peers. So: one line, rank 0 marks and closes its results file, MPI_Abort.
  void train() {
    rows_.start_clock();
    try {
      for (int i = start_; i < total_; ++i) {
        if (i == o_.debug_nan_at_step && w_.rank == 0) engine_.fault_target().poison_staged_batch();
        window_.before_step(i);
        // The schedule advances with every step, skipped ones included (torch: scheduler.step()
        // runs even when GradScaler skips optimizer.step()).
        const StepContext ctx{i, window_.is_timed(i), schedule_.lr_at(i)};
        const StepRecord rec = run_step(i, ctx.lr);
        window_.after_step(i, rec);
        stop_.heartbeat(i);
        steps_done_ = i + 1;
        // One agreement per step: a signal or a non-finite step on any rank ends or marks the
        // step on every rank at once.
        const StopControl::Verdict v = stop_.agree(rec.nonfinite);
        const bool last = i + 1 == total_;
        // Checkpoint after this step: every --checkpoint-every steps, at the end, on a signal
        // stop; never after a step that stops the run as non-finite.
        const bool checkpoint = !stop_.nonfinite_stops(v) && checkpointer_.due(i + 1, last, v.signal != 0);
        const bool evaluate = evaluator_ && eval_due(o_.eval_every, i + 1, total_);
        // The row is deferred only when nothing follows this step but the next one.
        rows_.gather(rec, ctx, defer_rows_ && !(last || v.signal || v.nonfinite || checkpoint || evaluate));
        if (checkpoint && !checkpoint_after(i)) break;
        if (stop_.stops_after(i, v)) break;
        if (evaluate) evaluate_after(i);
      }
    } catch (const std::exception& e) {
      if (w_.rank == 0 && results_ && results_->is_open()) {
        try {
          rows_.write_pending();  // the last completed step's row
          results_->set_attr("stop_reason", error_reason(steps_done_));
          results_->set_attr("steps_completed", (int64_t)steps_done_);
          results_->close();
        } catch (...) {  // the rows already flushed stay readable
        }
      }
      abort_all(w_, e.what(), 1);
    }
    rows_.write_pending();  // (every exit above writes it; kept as a guard)
    trace_offsets_ms_ = trace_clock_.offsets_ms(w_);  // collective (with --trace): every rank left the loop together
  }

  /// Steps of the run completed so far, counted from the original run's step 0.
  const int& steps_done() const { return steps_done_; }
  const Evaluator* evaluator() const { return evaluator_.get(); }
  const Checkpointer& checkpointer() const { return checkpointer_; }
  const TimedWindow& window() const { return window_; }
  const StopControl& stop() const { return stop_; }
  const ChromeTrace& trace() const { return rows_.trace(); }
  /// Rank 0: TraceClock::offsets_ms of the ranks, after train().
  const std::vector<double>& trace_offsets_ms() const { return trace_offsets_ms_; }
  const StepRows& rows() const { return rows_; }

 private:
  /// Step i on this rank: its K micro-steps launched on the staged batches, each fetching and
  /// staging the next batch while it runs (the previous step's deferred row is written after the
  /// first launch), then the step finished. Fills data_wait_ms (the waits for this step's
  /// batches) and wall_ms (host time from setting `lr` to the step's end).
  StepRecord run_step(int i, double lr) {
    const auto t0 = Clock::now();
    if (i == start_) trace_clock_.mark_first_step();  // the engine's time origin follows at once
    engine_.set_lr(lr);
    StepRecord rec;
    double data_wait_ms = data_wait_next_ms_;
    {
      NvtxRange batch_range("Batch " + std::to_string(i), NvtxColor::Blue);
      for (int j = 0; j < k_; ++j) {
        engine_.run_micro_step(j, k_);
        if (j == 0) rows_.write_pending();  // GPU: while this step runs on the device
        const bool more = i + 1 < total_ || j + 1 < k_;
        const double wait = more ? feed_.stage_next(micro_batches_++) : 0.0;
        if (j + 1 < k_) data_wait_ms += wait;
        else data_wait_next_ms_ = wait;
      }
      if (fault_.due(i, w_.rank)) fault_.trigger(engine_.fault_target(), w_.rank, i);  // the step's collectives in flight
      engine_.finish_step(&rec);
    }
    rec.data_wait_ms = data_wait_ms;
    rec.wall_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    return rec;
  }

  /// The checkpoint after step i (collective). False when it failed (StopControl records the stop).
  bool checkpoint_after(int i) {
    const auto c0 = Clock::now();
    const std::string err = checkpointer_.write(engine_, i + 1, first_batch_ + (int64_t)(i + 1 - start_) * k_);
    const double took = seconds_since(c0);
    stop_.heartbeat(i);  // the watchdog measures steps: a checkpoint gets its own --step-timeout
    window_.exclude(i, took);
    if (!err.empty()) {
      stop_.checkpoint_failed(i, err);
      return false;
    }
    if (w_.rank == 0) {
      std::printf("[vitddp] checkpoint after step %d written to %s (%.2f s; a resume starts at step %d)\n", i,
                  checkpointer_.last_file().c_str(), took, i + 1);
      std::fflush(stdout);
    }
    return true;
  }

  /// The evaluation after step i (collective), between steps: the next batch is already staged
  /// and stays so; not part of any step's timing nor of the timed window.
  void evaluate_after(int i) {
    double eval_s = 0;
    stop_.heartbeat(i);  // the evaluation gets its own --step-timeout
    evaluator_->run(i, &eval_s);
    window_.exclude(i, eval_s);
    stop_.heartbeat(i);  // the watchdog measures steps, not evaluations
  }

  const Options& o_;
  const World& w_;
  Engine& engine_;
  ResultsFile* results_;  // rank 0; null elsewhere
  const int start_, total_, k_;
  const int64_t first_batch_;
  const LrSchedule schedule_;
  TraceClock trace_clock_;  // --trace only
  BatchFeed feed_;
  Checkpointer checkpointer_;
  std::unique_ptr<Evaluator> evaluator_;
  TimedWindow window_;
  int64_t micro_batches_;     // index of the next batch taken from the data source
  double data_wait_next_ms_;  // the wait for the next step's first batch
  StepRows rows_;
  StopControl stop_;
  const bool defer_rows_;
  int steps_done_;
  const FaultInjection fault_;  // --debug-fail-*: off unless asked
  std::vector<double> trace_offsets_ms_;
};

/// The median of the finite values (numpy.median: the mean of the two middle ones for an even
/// count); NaN when there is none.
double median_busbw(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x); }), v.end());
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string format_gbps(double gbps) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.4g", gbps);
  return buf;
}

/// Rank 0, after a run whose timed window ran whole: the /summary timing results, the console
/// summary (with the line of the Chrome trace, written by write_whole_files); closes the file.
void write_timing_summary(ResultsFile& f, const Options& o, const World& w, const ParamLayout& layout, const Run& run) {
  const TimedWindow& win = run.window();
  const double sps = win.count() / win.seconds();
  // A step of --grad-accum-steps K processes K micro-batches of --batch-size on each rank.
  const double img_rank = sps * o.batch_size * o.grad_accum_steps;
  const double tflops = 3.0 * forward_flops_per_image(layout.cfg) * img_rank / 1e12;
  const double median_ms = win.median_step_ms();
  f.write_summary("steps_per_second", sps, "steps/s", "timed steps / host wall time of the timed window (rank 0)");
  f.write_summary("images_per_second_per_rank", img_rank, "images/s", "steps_per_second x batch_size x grad_accum_steps");
  f.write_summary("images_per_second", img_rank * w.world_size, "images/s", "all ranks together");
  f.write_summary("tflops_per_rank", tflops, "TFLOP/s", "3 x forward FLOPs x images per second per rank");
  f.write_summary("median_step_time", median_ms / 1e3, "s", "median device step time of the timed window (rank 0)");
  f.write_summary("timed_window", win.seconds(), "s", "host wall time of the timed window (rank 0)");
  f.write_summary("buckets_started_after_backward", win.late_buckets(), "1",
                  "bucket all-reduces of the timed window (rank 0) that started after backward compute ended");
  f.write_summary("buckets_timed", win.buckets(), "1", "bucket all-reduces in the timed window (rank 0)");
  const TimedWindow::Spread spread = win.step_time_spread();
  f.write_summary("step_time_min", spread.min / 1e3, "s", "shortest device step time of the timed window (rank 0)");
  f.write_summary("step_time_p90", spread.p90 / 1e3, "s",
                  "90th percentile of the timed window's device step times (rank 0; linear interpolation, numpy.percentile)");
  f.write_summary("step_time_max", spread.max / 1e3, "s", "longest device step time of the timed window (rank 0)");
  f.write_summary("step_time_cv", spread.cv, "1",
                  "coefficient of variation of the timed window's device step times: population stdev / mean (rank 0)");
  const double busbw = median_busbw(run.rows().timed_busbw());
  if (!std::isnan(busbw))
    f.write_summary("busbw_median", busbw, "GB/s",
                    "median over the timed steps of the step's bus bandwidth: rank 0's bytes_sent / the ranks' mean "
                    "allreduce_time over the buckets / 1e9 x 2(n-1)/n (nccl-tests; x (n-1)/n for the reduce-scatter "
                    "of --shard-optimizer)");
  f.close();
  if (!o.trace.empty())  // written by write_whole_files
    std::printf("[vitddp] Chrome trace (%zu events) written to %s\n", run.trace().size(), o.trace.c_str());
  std::printf("[vitddp] timed window: %d step%s in %.3f s: %.2f steps/s per rank, %.1f images/s per rank, "
              "%.1f images/s total, %.4g TFLOP/s per rank; median step %.1f ms (min %.1f, p90 %.1f, max %.1f, cv %.3f)%s\n",
              win.count(), win.count() == 1 ? "" : "s", win.seconds(), sps, img_rank, img_rank * w.world_size, tflops,
              median_ms, spread.min, spread.p90, spread.max, spread.cv,
              std::isnan(busbw) ? "" : ("; median busbw " + format_gbps(busbw) + " GB/s").c_str());
  if (o.ddp && w.world_size > 1)
    std::printf("[vitddp] collectives: %s; %d of %d bucket %s started after backward compute ended\n",
                collectives(o, w.world_size).c_str(), win.late_buckets(), win.buckets(),
                o.shard_optimizer ? "reduce-scatters" : "all-reduces");
}

/// Collective, at the end of a run: rank 0 writes the whole-file outputs, --save-weights and (after
/// a complete timed window) the --trace, each through its .tmp. Returns "" on every rank, or on
/// every rank the error of the writer that failed (one line naming the file and the reason).
std::string write_whole_files(const Options& o, const World& w, const ParamLayout& layout, Engine& engine,
                              const Run& run) {
  const int steps_done = run.steps_done();
  std::string error;
  // The bf16 all-gather keeps the fp32 masters sharded: every rank takes part in gathering them
  // to rank 0 (Engine::parameters, collective then; a failure there is every rank's).
  std::vector<float> masters;
  if (!o.save_weights.empty() && allgather_in_bf16(o, w.world_size)) {
    try {
      masters = engine.parameters();
    } catch (const std::exception& e) {
      return std::string("--save-weights: ") + e.what();
    }
  }
  // --optimizer-in-backward applied the non-finite step that stopped the run: its parameters are
  // not the model's last good ones, so they are not written (the last checkpoint, if any, is).
  const bool spoiled = o.optimizer_in_backward && run.stop().nonfinite_steps() > 0;
  if (w.rank == 0 && spoiled && !o.save_weights.empty())
    std::fprintf(stderr,
                 "[vitddp] --save-weights: %s not written: --optimizer-in-backward applied the non-finite step "
                 "before it was seen\n",
                 o.save_weights.c_str());
  if (w.rank == 0) {
    try {
      if (!o.save_weights.empty() && !spoiled) {
        // The fp32 all-gather and DDP keep every replica identical (same start, same averaged
        // gradients): rank 0's parameters are the model's; the bf16 all-gather's are the masters.
        try {
          save_weights(o.save_weights, layout, masters.empty() ? engine.parameters().data() : masters.data(),
                       o.overwrite);
        } catch (const std::exception& e) {  // one line starting with the option
          const std::string m = e.what(), own = "save_weights: ";
          throw std::runtime_error("--save-weights: " + (m.rfind(own, 0) == 0 ? m.substr(own.size()) : m));
        }
        std::printf("[vitddp] weights after %d step%s written to %s\n", steps_done, steps_done == 1 ? "" : "s",
                    o.save_weights.c_str());
      }
      if (!o.trace.empty() && run.window().complete(steps_done))
        run.trace().write(o.trace, w.world_size, run.trace_offsets_ms());
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  if (all_ranks_ok(error.empty())) return "";
  return error.empty() ? "writing an output failed on rank 0" : error;
}

/// The end of a run, on every rank: --save-weights and --trace (rank 0, write_whole_files; when
/// one fails every rank returns 1 and rank 0 marks the results file), the ranks' NCCL
/// transports; rank 0 records how the run ended and its summary, closes the file and prints where
/// it went. Returns the exit code.
int finish_run(const Options& o, const World& w, const ParamLayout& layout, Engine& engine, const Run& run,
               ResultsFile* results) {
  const int steps_done = run.steps_done(), total = o.total_steps();
  if (const std::string err = write_whole_files(o, w, layout, engine, run); !err.empty()) {
    // Every rank ends with exit code 1; the results file keeps its rows and says why.
    if (w.rank != 0) return 1;
    std::fprintf(stderr, "[vitddp] error: %s\n", err.c_str());
    try {
      results->set_attr("stop_reason", error_reason(steps_done));
      results->set_attr("steps_completed", (int64_t)steps_done);
      results->close();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "[vitddp] error: %s\n", e.what());
    }
    return 1;
  }
  const auto transports = gather_strings(engine.diagnostics().nccl_transport(), w);
  const StopControl& stop = run.stop();
  if (w.rank != 0) return stop.exit_code();
  results->set_attr("nccl_transport", transports);
  std::printf("[vitddp] NCCL transport: %s\n", transports[0].c_str());
  results->set_attr("stop_reason", stop.stop_reason());
  results->set_attr("steps_completed", (int64_t)steps_done);
  if (run.checkpointer().enabled()) {
    results->set_attr("checkpoint_steps", std::vector<int64_t>(run.checkpointer().written_steps()));
    results->set_attr("last_checkpoint", run.checkpointer().last_file());
  }
  results->write_summary("nonfinite_steps", stop.nonfinite_steps(), "1",
                         "steps whose loss or gradients held NaN/Inf (not applied; with --optimizer-in-backward "
                         "applied, and the run stopped)");
  if (!run.window().complete(steps_done)) {
    results->close();
    if (!stop.stopped())
      std::printf("[vitddp] resumed after the timed window: no timing summary; results written to %s\n", o.out.c_str());
    else
      std::printf("[vitddp] run ended early (%s) after %d of %d steps; results written to %s\n",
                  stop.stop_reason().c_str(), steps_done, total, o.out.c_str());
    return stop.exit_code();
  }
  write_timing_summary(*results, o, w, layout, run);
  std::printf("[vitddp] results written to %s\n", o.out.c_str());
  return stop.exit_code();
}

/// Rank 0's part of the start, once the engine exists: the environment of every rank (gathered,
/// collective), the PowerSGD warning, the file's header and resume point, the resume line.
void write_start(const Options& o, const World& w, const ParamLayout& layout, const std::vector<Bucket>& buckets,
                 const Engine& engine, ResultsFile* results, const std::string& cmd, int start, int64_t resumed_updates) {
  const EngineInfo info = engine.info();
  const auto hosts = gather_strings(w.hostname, w);
  const auto devices = gather_strings(info.device_name, w);
  const auto uuids = gather_strings(info.device_uuid, w);
  GpuTopology mine;
  mine.status = "no GPU (CPU backend)";
  const auto topology = gather_topology(info.backend == "gpu" ? query_gpu_topology(info.device_index) : mine, w);
  if (w.rank == 0) {
    std::printf("[vitddp] %s\n", topology_line(topology, hosts).c_str());
    const std::string warning = powersgd_start_warning(o);
    if (!warning.empty()) std::printf("[vitddp] warning: %s\n", warning.c_str());
    write_header(*results, o, w, layout, buckets, info, cmd, hosts, devices, uuids);
    write_topology(*results, topology, hosts);
    results->set_attr("resumed_from", o.resume);
    results->set_attr("resumed_from_step", (int64_t)start);
    results->flush();
    if (!o.resume.empty())
      std::printf("[vitddp] resuming from %s at step %d of %d (optimizer updates applied: %lld)\n", o.resume.c_str(),
                  start, o.total_steps(), (long long)resumed_updates);
  }
  std::fflush(stdout);
}

}  // namespace

int run_training(const Options& o, const World& w, const std::string& cmd, const std::function<void()>& notices) {
  h5::prepare_library();  // HDF5 failures as one-line exceptions, no shutdown crash after one (src/io/h5_util.h)
  const ParamLayout layout = make_param_layout(vit_config(o.model, o.num_classes));
  const std::vector<Bucket> buckets = run_buckets(o, layout);
  // Every rank must hold the same bucket layout, or all-reduces would mix unrelated gradients.
  if (!all_ranks_equal(bucket_fingerprint(buckets))) throw std::runtime_error("ranks disagree on the bucket layout (different options or model?)");

  RunInputs in;  // every input read and checked, every output checked: before any device work
  if (!preflight(o, w, layout, &in)) return 2;
  if (notices) notices();
  const int start = in.start_step();  // first step of this run (0-based)
  if (w.rank == 0)
    std::printf("[vitddp] %s (%zu parameters), %d rank(s), backend %s, batch %d per rank, %zu bucket(s)%s\n",
                layout.cfg.name.c_str(), layout.parameter_count(), w.world_size, to_string(o.backend).c_str(), o.batch_size,
                buckets.size(), o.ddp ? "" : " (no DDP)");
  int64_t resumed_updates = 0;  // optimizer updates the checkpoint had applied
  const std::unique_ptr<Engine> engine = start_engine(o, w, layout, buckets, in, &resumed_updates);
  if (!engine) return 2;
  if (!create_results_file(o, w, &in)) return 2;
  ResultsFile* results = in.results ? &*in.results : nullptr;
  write_start(o, w, layout, buckets, *engine, results, cmd, start, resumed_updates);

  Run run(o, w, layout, buckets.size(), *engine, in);
  const auto& eval_data = in.eval_data;
  if (const Evaluator* evaluator = run.evaluator(); evaluator && w.rank == 0)
    std::printf("[vitddp] evaluation every %d step(s) and after the last on the %s split: %lld images, %lld on rank 0\n",
                  o.eval_every, to_string(o.eval_split).c_str(), (long long)eval_data->count, (long long)evaluator->shard().size());
  const ErrorMark error_mark(in.results, run.steps_done());
  run.train();
  return finish_run(o, w, layout, *engine, run, results);
}

}  // namespace vitddp
