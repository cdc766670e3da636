// The series of the results file, declared once: name, units, dtype, axes, description and where
// each value comes from. The trainer's rows (the MPI gather of a step), the HDF5 writer, the
// progress line and the evaluation's records all read these tables, and tests/cpu/test_series.cpp
// checks docs/schema.md against them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "src/engines/engine.h"
#include "src/io/results_h5.h"

namespace vitddp {

/// The axes of a series in the results file (its shape and its `axes` attribute).
enum class SeriesAxes {
  RankStep,        ///< [ranks, steps], axes "rank,step": one value per rank and step, from that rank's StepRecord
  RankStepBucket,  ///< [ranks, steps, buckets], axes "rank,step,bucket": from that rank's StepRecord::buckets
  Step,            ///< [1, steps], axes "rank,step": one value per step, from rank 0's StepContext
  Eval,            ///< [1, evaluations], axes "rank,step": one value per evaluation, from an EvalSample
  /// [ranks, steps, groups], axes "rank,step,group": one value per gradient-ready group
  /// (grad_ready_groups), from StepRecord::grad_ready_ms; only in runs that record them (groups > 0)
  RankStepGroup,
};

/// What rank 0 records of a step besides the ranks' StepRecords.
struct StepContext {
  int step = 0;        ///< the step's 0-based index in the run
  bool timed = false;  ///< inside the timed window (TimedWindow::is_timed)
  double lr = 0;       ///< learning rate of the step's optimizer update (also for a skipped step)
};

/// One evaluation pass as recorded (Evaluator::run).
struct EvalSample {
  int step = 0;         ///< the step after which it ran (0-based, as the step axis of the per-step series)
  EvalResult result;    ///< reduced over all ranks
  double seconds = 0;   ///< host wall time of the pass on rank 0
};

class StepRow;

/// One series of the results file. Values are returned in the series' units (seconds for times:
/// StepRecord's milliseconds / 1e3) as double; an i64 series' values are integers. Exactly the
/// accessors of `axes` are set:
///  - RankStep: get(record, 0) and set(record, 0, value) (set is get's inverse: rank 0 rebuilds
///    the other ranks' records from their gathered rows);
///  - RankStepBucket: get(record, b) / set(record, b, value) for bucket b; get is 0 for a bucket
///    the record lacks, set needs record.buckets sized (BucketTimes::resize);
///  - RankStepGroup: the same per gradient-ready group g (set needs record.grad_ready_ms sized);
///  - Step: step_value(context);  Eval: eval_value(sample).
struct SeriesDef {
  const char* name;         ///< dataset path, e.g. "timing/forward"
  const char* units;        ///< `units` attribute: "s", "bytes", "1"
  H5Dtype dtype;
  SeriesAxes axes;
  const char* description;  ///< `description` attribute
  const char* progress;     ///< label on rank 0's progress line (value in ms), or nullptr: not shown
  int progress_pos;         ///< position on the progress line (1 = first), 0 when not shown
  double (*get)(const StepRecord&, size_t bucket);
  void (*set)(StepRecord&, size_t bucket, double value);
  double (*step_value)(const StepContext&);
  double (*eval_value)(const EvalSample&);
  /// A RankStepBucket series derived on rank 0 from one rank's packed row (other series' values
  /// as stored in the file) and the world size; get and set are null and it is not part of the
  /// gathered StepRow: derived(layout, row, bucket, world_size).
  double (*derived)(const StepRow&, const double* row, size_t bucket, int world_size) = nullptr;
};

/// Every per-step series, in the order they are created in the results file.
const std::vector<SeriesDef>& step_series();
/// The eval/* series (--eval-every), in creation order.
const std::vector<SeriesDef>& eval_series();

/// The shape the schema document writes for `axes`: "[ranks, steps]", "[ranks, steps, buckets]",
/// "[1, steps]", "[1, evals]" or "[ranks, steps, groups]".
const char* axes_shape(SeriesAxes axes);
/// "f64" or "i64".
const char* dtype_name(H5Dtype dtype);

/// The flat row of doubles one rank sends to rank 0 per step (MPI_Gather): walking step_series()
/// in order, one value per RankStep series, `buckets` values per RankStepBucket series and
/// `groups` values per RankStepGroup series, in the series' units (Step series are not part of
/// it). `groups` = 0: the run records no gradient-ready times (no RankStepGroup values).
class StepRow {
 public:
  explicit StepRow(size_t buckets, size_t groups = 0);
  /// Doubles per rank.
  size_t size() const { return size_; }
  size_t buckets() const { return buckets_; }
  size_t groups() const { return groups_; }
  std::vector<double> pack(const StepRecord& r) const;
  /// The record a packed row came from (every field that a series holds; the rest default).
  StepRecord unpack(const double* row) const;
  /// Where series `name` (RankStep, RankStepBucket or RankStepGroup, not derived) begins in a
  /// packed row; std::invalid_argument for another name.
  size_t offset(const std::string& name) const;

 private:
  size_t buckets_, groups_, size_;
};

/// Creates every step_series() dataset in `f` for `ranks` ranks, `buckets` buckets and `groups`
/// gradient-ready groups (the RankStepGroup series only when groups > 0).
void create_step_series(ResultsFile& f, int64_t ranks, int64_t buckets, int64_t groups = 0);
/// Appends one step to every step_series() dataset that create_step_series made: `rows` holds
/// `ranks` packed rows of StepRow(buckets, groups) (rank r's at rows + r * size()), as gathered;
/// the Step series take `ctx`. Throws as ResultsFile::append_step.
void append_step_series(ResultsFile& f, const double* rows, int ranks, size_t buckets, const StepContext& ctx,
                        size_t groups = 0);

/// Creates the eval_series() datasets; appends one evaluation to them.
void create_eval_series(ResultsFile& f);
void append_eval_series(ResultsFile& f, const EvalSample& sample);

/// The collectives of a bucket: DDP's all-reduce, ZeRO-1's reduce-scatter and all-gather.
enum class Collective { AllReduce, ReduceScatter, AllGather };

/// nccl-tests' bus factor (doc/PERFORMANCE.md of NVIDIA/nccl-tests) on n = `world_size` ranks:
/// 2(n-1)/n for an all-reduce, (n-1)/n for a reduce-scatter or an all-gather; 0 for one rank.
double bus_factor(Collective c, int world_size);

/// busbw of one collective in GB/s (1e9 bytes/s), nccl-tests' definitions: algbw = bytes /
/// seconds (bytes: the whole buffer, for a reduce-scatter or an all-gather all ranks' chunks),
/// busbw = algbw x bus_factor. 0 when `seconds` <= 0 (nothing recorded) or for one rank.
double busbw_gbps(Collective c, double bytes, double seconds, int world_size);
/// busbw_gbps of an all-reduce.
double allreduce_busbw_gbps(double bytes, double seconds, int world_size);

/// The byte-weighted busbw of one step's gradient collective over all ranks, GB/s: rank 0's
/// bytes_sent and the all-reduce (or reduce-scatter) time averaged over the ranks, summed over the
/// buckets whose mean time is > 0: busbw_gbps(sum bytes, sum mean seconds, ranks), with the
/// reduce-scatter's factor when rank 0's buckets/reduce_scattered is set (--shard-optimizer).
/// `rows`: `ranks` packed rows of StepRow(buckets, groups), as gathered. The figure
/// vitddp_tools.bandwidth.BucketBandwidth.per_step() computes from the file. NaN when no bucket
/// recorded a time (or no buckets); 0 for one rank.
double step_busbw_gbps(const double* rows, int ranks, size_t buckets, size_t groups = 0);

/// The run-level figures of rank 0's progress line (every rate over all ranks).
struct Progress {
  int done = 0;               ///< steps of the run completed, counted from its step 0 (the step's index + 1)
  double elapsed_s = 0;       ///< host wall time since this run's step loop began (rank 0)
  double eta_s = 0;           ///< remaining steps x (elapsed_s / steps this run completed)
  double steps_per_s = 0;     ///< steps / wall time since the previous progress line (or the loop's start)
  double images_per_s = 0;    ///< steps_per_s x batch_size x grad_accum_steps x world_size
};

/// "12.3 s" under a minute, "4m05s" under an hour, else "1h02m03s".
std::string format_duration(double seconds);

/// Rank 0's progress line of step ctx.step (of `total` steps; the step's 0-based index, as in the
/// results file, the trace and the debug options), without newline:
/// "[vitddp] step 2 (3/4 done, timed) elapsed 1.2 s, ETA 0.4 s, 2.50 steps/s, 20.0 images/s,
/// loss 1.6102, lr 0.001 | step 0.1 ms: fwd 0.0, bwd 0.0, ..." with the series that have a
/// `progress` label, by progress_pos, in milliseconds.
std::string progress_line(const StepRecord& r, const StepContext& ctx, int total, const char* phase,
                          const Progress& p);

}  // namespace vitddp
