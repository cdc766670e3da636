#include "src/io/series.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>

namespace vitddp {
namespace {

// Accessors. A StepRecord holds milliseconds; the file holds seconds: scalars are divided by 1e3,
// per-bucket values multiplied by 1e-3 (the two are not always the same double).
template <double StepRecord::*F>
double ms_get(const StepRecord& r, size_t) {
  return r.*F / 1e3;
}
template <double StepRecord::*F>
void ms_set(StepRecord& r, size_t, double v) {
  r.*F = v * 1e3;
}
double loss_get(const StepRecord& r, size_t) { return r.loss; }
void loss_set(StepRecord& r, size_t, double v) { r.loss = v; }
double nonfinite_get(const StepRecord& r, size_t) { return r.nonfinite ? 1.0 : 0.0; }
void nonfinite_set(StepRecord& r, size_t, double v) { r.nonfinite = v != 0; }

/// Bucket vector F of StepRecord::buckets, times `scale` (1e-3 for milliseconds, 1 for counts).
template <auto F, int kMilli>
double bucket_get(const StepRecord& r, size_t b) {
  const auto& v = r.buckets.*F;
  return b < v.size() ? (double)v[b] * (kMilli ? 1e-3 : 1.0) : 0.0;
}
template <auto F, int kMilli>
void bucket_set(StepRecord& r, size_t b, double v) {
  auto& vec = r.buckets.*F;
  vec[b] = static_cast<typename std::decay_t<decltype(vec)>::value_type>(kMilli ? v * 1e3 : v);
}

/// StepRecord::grad_ready_ms[g] in seconds (0 for a group the record lacks).
double ready_get(const StepRecord& r, size_t g) { return g < r.grad_ready_ms.size() ? r.grad_ready_ms[g] * 1e-3 : 0.0; }
void ready_set(StepRecord& r, size_t g, double v) { r.grad_ready_ms[g] = v * 1e3; }

constexpr auto kRank = SeriesAxes::RankStep;
constexpr auto kBucket = SeriesAxes::RankStepBucket;
constexpr auto kF = H5Dtype::f64;
constexpr auto kI = H5Dtype::i64;

double busbw_derived(const StepRow& layout, const double* row, size_t b, int world_size) {
  const Collective c = row[layout.offset("buckets/reduce_scattered") + b] != 0 ? Collective::ReduceScatter : Collective::AllReduce;
  return busbw_gbps(c, row[layout.offset("buckets/bytes_sent") + b], row[layout.offset("buckets/allreduce_time") + b],
                    world_size);
}

double allgather_busbw_derived(const StepRow& layout, const double* row, size_t b, int world_size) {
  return busbw_gbps(Collective::AllGather, row[layout.offset("buckets/allgather_bytes") + b],
                    row[layout.offset("buckets/allgather_time") + b], world_size);
}

#define VITDDP_MS(field) &ms_get<&StepRecord::field>, &ms_set<&StepRecord::field>, nullptr, nullptr
#define VITDDP_BUCKET(field, milli) \
  &bucket_get<&BucketTimes::field, milli>, &bucket_set<&BucketTimes::field, milli>, nullptr, nullptr

const std::vector<SeriesDef> kStepSeries = {
    {"timing/data_wait", "s", kF, kRank, "host time blocked waiting for the data source ('get batch')", "data wait", 6,
     VITDDP_MS(data_wait_ms)},
    {"timing/input_wait", "s", kF, kRank, "compute stream waiting for the batch's host-to-device copy", nullptr, 0,
     VITDDP_MS(input_wait_ms)},
    {"timing/forward", "s", kF, kRank, "forward pass and loss (CUDA events on the compute stream; with --shard-optimizer "
     "on the GPU including the waits for the previous step's all-gathers)", "fwd", 2,
     VITDDP_MS(forward_ms)},
    {"timing/backward", "s", kF, kRank, "backward compute; the all-reduces it overlaps run meanwhile on the comm stream",
     "bwd", 3, VITDDP_MS(backward_ms)},
    {"timing/exposed_comm", "s", kF, kRank, "after backward compute, time the compute stream waited for the last all-reduce",
     "exposed comm", 4, VITDDP_MS(exposed_comm_ms)},
    {"timing/optimizer", "s", kF, kRank, "optimizer step (SGD or AdamW) over the flat parameter buffer; with --shard-optimizer over the rank's "
     "chunks, and on the CPU backend the parameters' all-gathers (on the GPU they overlap the next forward)", "opt", 5,
     VITDDP_MS(optimizer_ms)},
    {"timing/step_time", "s", kF, kRank, "device time of the step, step-start event to step-end event", "step", 1,
     VITDDP_MS(step_ms)},
    {"timing/wall_time", "s", kF, kRank, "host wall time of the step, get batch to step end", nullptr, 0,
     VITDDP_MS(wall_ms)},
    {"training/loss", "1", kF, kRank, "this rank's mean cross-entropy of the step (mean over micro-steps)", nullptr, 0,
     &loss_get, &loss_set, nullptr, nullptr},
    {"timing/step_start", "s", kF, kRank, "step-start event, from the first step's start event on the same rank",
     nullptr, 0, VITDDP_MS(start_ms)},
    {"timing/backward_end", "s", kF, kRank, "end of backward compute (last micro-step), from the step-start event",
     nullptr, 0, VITDDP_MS(backward_end_ms)},
    {"training/nonfinite", "1", kI, kRank,
     "1 if the step's loss or averaged gradients held NaN/Inf (update not applied)", nullptr, 0, &nonfinite_get,
     &nonfinite_set, nullptr, nullptr},
    {"buckets/allreduce_start", "s", kF, kBucket,
     "start of the bucket's gradient communication work (hook + all-reduce, or reduce-scatter with "
     "--shard-optimizer) on the comm stream, from the step-start event",
     nullptr, 0, VITDDP_BUCKET(start_ms, 1)},
    {"buckets/allreduce_end", "s", kF, kBucket,
     "end of the bucket's gradient communication work on the comm stream, from the step-start event", nullptr, 0,
     VITDDP_BUCKET(end_ms, 1)},
    {"buckets/bytes_sent", "bytes", kI, kBucket,
     "payload bytes of this rank's all-reduce (or reduce-scatter) calls for the bucket (fp32 numel*4; fp16/bf16 "
     "numel*2; PowerSGD uncompressed + P + Q)",
     nullptr, 0, VITDDP_BUCKET(bytes_sent, 0)},
    {"buckets/compressed", "1", kI, kBucket,
     "1 if the bucket's payload was compressed this step (fp16/bf16; PowerSGD from its start step)", nullptr, 0,
     VITDDP_BUCKET(compressed, 0)},
    {"buckets/compress_time", "s", kF, kBucket, "compression + decompression work of the bucket (comm stream)", nullptr,
     0, VITDDP_BUCKET(compress_ms, 1)},
    {"buckets/allreduce_time", "s", kF, kBucket,
     "time inside the bucket's all-reduce (or reduce-scatter) calls (summed)", nullptr, 0,
     VITDDP_BUCKET(allreduce_ms, 1)},
    {"buckets/copy_time", "s", kF, kBucket,
     "gradient <-> bucket buffer copies (--grad-as-bucket-view off; 0 otherwise)", nullptr, 0,
     VITDDP_BUCKET(copy_ms, 1)},
    {"buckets/busbw", "GB/s", kF, kBucket,
     "bus bandwidth of the bucket's gradient collective, nccl-tests: bytes_sent / allreduce_time / 1e9 x 2(n-1)/n "
     "on n ranks, x (n-1)/n for a reduce-scatter (0 for one rank or no recorded time)",
     nullptr, 0, nullptr, nullptr, nullptr, nullptr, &busbw_derived},
    {"buckets/reduce_scattered", "1", kI, kBucket,
     "1 if the bucket's gradients were reduce-scattered (--shard-optimizer, ZeRO-1), 0 for an all-reduce", nullptr,
     0, VITDDP_BUCKET(reduce_scattered, 0)},
    {"buckets/allgather_start", "s", kF, kBucket,
     "--shard-optimizer: start of an all-gather of the bucket's updated parameters, from the step start (CPU: this "
     "step's; GPU: the previous step's, which this step's forward waited for, negative when begun before the step)",
     nullptr, 0, VITDDP_BUCKET(allgather_start_ms, 1)},
    {"buckets/allgather_end", "s", kF, kBucket,
     "--shard-optimizer: end of that all-gather of the bucket's updated parameters, from the step start", nullptr,
     0, VITDDP_BUCKET(allgather_end_ms, 1)},
    {"buckets/allgather_time", "s", kF, kBucket, "--shard-optimizer: time inside the bucket's all-gather call", nullptr,
     0, VITDDP_BUCKET(allgather_ms, 1)},
    {"buckets/allgather_bytes", "bytes", kI, kBucket,
     "--shard-optimizer: payload bytes of that all-gather (the whole bucket: numel*4 in fp32, numel*2 with the bf16 "
     "all-gather; 0 without sharding, "
     "for a skipped step on the CPU, in the first step on the GPU)",
     nullptr, 0, VITDDP_BUCKET(allgather_bytes, 0)},
    {"buckets/allgather_busbw", "GB/s", kF, kBucket,
     "bus bandwidth of the bucket's all-gather, nccl-tests: allgather_bytes / allgather_time / 1e9 x (n-1)/n (0 "
     "for one rank or no all-gather)",
     nullptr, 0, nullptr, nullptr, nullptr, nullptr, &allgather_busbw_derived},
    {"grad_ready/ready_time", "s", kF, SeriesAxes::RankStepGroup,
     "when backward reported the group's gradients final (GPU: a CUDA event on the compute stream right after the "
     "group's last kernel; CPU: the host clock), last micro-step, from the step-start event; --record-grad-ready",
     nullptr, 0, &ready_get, &ready_set, nullptr, nullptr},
    {"steps/timed", "1", kI, SeriesAxes::Step, "1 for the steps of the timed window, 0 for warm-up and cool-down",
     nullptr, 0, nullptr, nullptr, [](const StepContext& c) { return c.timed ? 1.0 : 0.0; }, nullptr},
    {"training/lr", "1", kF, SeriesAxes::Step,
     "learning rate of the step's optimizer update (--lr-schedule; also for a skipped step)", nullptr, 0, nullptr,
     nullptr, [](const StepContext& c) { return c.lr; }, nullptr},
};

#undef VITDDP_MS
#undef VITDDP_BUCKET

SeriesDef eval_def(const char* name, const char* units, H5Dtype dtype, const char* description,
                   double (*value)(const EvalSample&)) {
  return {name, units, dtype, SeriesAxes::Eval, description, nullptr, 0, nullptr, nullptr, nullptr, value};
}

const std::vector<SeriesDef> kEvalSeries = {
    eval_def("eval/step", "1", kI, "the step after which the evaluation ran (0-based, as the console and the per-step series)",
             [](const EvalSample& e) { return (double)e.step; }),
    eval_def("eval/accuracy", "1", kF, "top-1 accuracy over the whole evaluation split, fraction in [0, 1]",
             [](const EvalSample& e) { return e.result.accuracy(); }),
    eval_def("eval/loss", "1", kF, "mean cross-entropy over the whole evaluation split (nats)",
             [](const EvalSample& e) { return e.result.mean_loss(); }),
    eval_def("eval/samples", "1", kI, "samples evaluated over all ranks (equals the split size)",
             [](const EvalSample& e) { return (double)e.result.count; }),
    eval_def("eval/time", "s", kF, "host wall time of the evaluation pass (all batches and the MPI reduction), rank 0",
             [](const EvalSample& e) { return e.seconds; }),
};

/// Appends `values` (one per rank, or per rank and bucket) to series `s` in its dtype.
void append_values(ResultsFile& f, const SeriesDef& s, const std::vector<double>& values) {
  if (s.dtype == H5Dtype::i64) {
    f.append_step(s.name, std::vector<int64_t>(values.begin(), values.end()));
  } else {
    f.append_step(s.name, values);
  }
}

/// Values of series `s` in one rank's packed row (0 for Step and derived series).
size_t row_values(const SeriesDef& s, size_t buckets, size_t groups) {
  if (s.derived) return 0;
  switch (s.axes) {
    case SeriesAxes::RankStep: return 1;
    case SeriesAxes::RankStepBucket: return buckets;
    case SeriesAxes::RankStepGroup: return groups;
    default: return 0;
  }
}

}  // namespace

const std::vector<SeriesDef>& step_series() { return kStepSeries; }
const std::vector<SeriesDef>& eval_series() { return kEvalSeries; }

const char* axes_shape(SeriesAxes axes) {
  switch (axes) {
    case SeriesAxes::RankStep: return "[ranks, steps]";
    case SeriesAxes::RankStepBucket: return "[ranks, steps, buckets]";
    case SeriesAxes::Step: return "[1, steps]";
    case SeriesAxes::Eval: return "[1, evals]";
    case SeriesAxes::RankStepGroup: return "[ranks, steps, groups]";
  }
  throw std::logic_error("axes_shape: unknown SeriesAxes");
}

const char* dtype_name(H5Dtype dtype) { return dtype == H5Dtype::i64 ? "i64" : "f64"; }

StepRow::StepRow(size_t buckets, size_t groups) : buckets_(buckets), groups_(groups), size_(0) {
  for (const SeriesDef& s : kStepSeries) size_ += row_values(s, buckets, groups);
}

std::vector<double> StepRow::pack(const StepRecord& r) const {
  std::vector<double> v;
  v.reserve(size_);
  for (const SeriesDef& s : kStepSeries) {
    if (s.derived) continue;
    if (s.axes == SeriesAxes::RankStep) v.push_back(s.get(r, 0));
    if (s.axes == SeriesAxes::RankStepBucket)
      for (size_t b = 0; b < buckets_; ++b) v.push_back(s.get(r, b));
    if (s.axes == SeriesAxes::RankStepGroup)
      for (size_t g = 0; g < groups_; ++g) v.push_back(s.get(r, g));
  }
  return v;
}

StepRecord StepRow::unpack(const double* row) const {
  StepRecord r;
  r.buckets.resize(buckets_);
  r.grad_ready_ms.assign(groups_, 0.0);
  for (const SeriesDef& s : kStepSeries) {
    if (s.derived) continue;
    if (s.axes == SeriesAxes::RankStep) s.set(r, 0, *row++);
    if (s.axes == SeriesAxes::RankStepBucket)
      for (size_t b = 0; b < buckets_; ++b) s.set(r, b, *row++);
    if (s.axes == SeriesAxes::RankStepGroup)
      for (size_t g = 0; g < groups_; ++g) s.set(r, g, *row++);
  }
  return r;
}

size_t StepRow::offset(const std::string& name) const {
  size_t at = 0;
  for (const SeriesDef& s : kStepSeries) {
    if (s.derived || s.axes == SeriesAxes::Step) continue;
    if (name == s.name) return at;
    at += row_values(s, buckets_, groups_);
  }
  throw std::invalid_argument("StepRow::offset: no gathered series '" + name + "'");
}

void create_step_series(ResultsFile& f, int64_t ranks, int64_t buckets, int64_t groups) {
  for (const SeriesDef& s : kStepSeries) {
    const int64_t rows = s.axes == SeriesAxes::Step ? 1 : ranks;
    if (s.axes == SeriesAxes::RankStepGroup) {
      if (groups > 0) f.create_series(s.name, s.units, s.description, rows, groups, s.dtype, "group");
      continue;
    }
    f.create_series(s.name, s.units, s.description, rows, s.axes == SeriesAxes::RankStepBucket ? buckets : 0, s.dtype);
  }
}

void append_step_series(ResultsFile& f, const double* rows, int ranks, size_t buckets, const StepContext& ctx,
                        size_t groups) {
  const StepRow layout(buckets, groups);
  const size_t stride = layout.size();
  std::vector<double> values;
  size_t offset = 0;  // of the series in a packed row
  for (const SeriesDef& s : kStepSeries) {
    values.clear();
    if (s.axes == SeriesAxes::RankStepGroup && groups == 0) continue;  // not recorded: no dataset
    if (s.axes == SeriesAxes::Step) {
      values.push_back(s.step_value(ctx));
    } else if (s.derived) {
      for (int r = 0; r < ranks; ++r)
        for (size_t b = 0; b < buckets; ++b) values.push_back(s.derived(layout, rows + (size_t)r * stride, b, ranks));
    } else {
      const size_t n = row_values(s, buckets, groups);
      for (int r = 0; r < ranks; ++r) {
        const double* first = rows + (size_t)r * stride + offset;
        values.insert(values.end(), first, first + n);
      }
      offset += n;
    }
    append_values(f, s, values);
  }
}

void create_eval_series(ResultsFile& f) {
  for (const SeriesDef& s : kEvalSeries) f.create_series(s.name, s.units, s.description, 1, 0, s.dtype);
}

void append_eval_series(ResultsFile& f, const EvalSample& sample) {
  for (const SeriesDef& s : kEvalSeries) append_values(f, s, {s.eval_value(sample)});
}

double bus_factor(Collective c, int world_size) {
  if (world_size < 2) return 0.0;
  const double n = world_size;
  return c == Collective::AllReduce ? 2.0 * (n - 1) / n : (n - 1) / n;
}

double busbw_gbps(Collective c, double bytes, double seconds, int world_size) {
  if (seconds <= 0 || world_size < 2) return 0.0;
  return bytes / seconds / 1e9 * bus_factor(c, world_size);
}

double allreduce_busbw_gbps(double bytes, double seconds, int world_size) {
  return busbw_gbps(Collective::AllReduce, bytes, seconds, world_size);
}

double step_busbw_gbps(const double* rows, int ranks, size_t buckets, size_t groups) {
  const StepRow layout(buckets, groups);
  const size_t time = layout.offset("buckets/allreduce_time"), sent = layout.offset("buckets/bytes_sent");
  const size_t scattered = layout.offset("buckets/reduce_scattered");
  Collective c = Collective::AllReduce;
  for (size_t b = 0; b < buckets; ++b)
    if (rows[scattered + b] != 0) c = Collective::ReduceScatter;  // rank 0's; one run uses one collective
  double bytes = 0, seconds = 0;
  if (ranks < 1) return std::numeric_limits<double>::quiet_NaN();
  for (size_t b = 0; b < buckets; ++b) {
    double mean_s = 0;  // as numpy's mean over the rank axis: the sum, then / ranks
    for (int r = 0; r < ranks; ++r) mean_s += rows[(size_t)r * layout.size() + time + b];
    mean_s /= ranks;
    if (mean_s <= 0) continue;
    bytes += rows[sent + b];  // rank 0's
    seconds += mean_s;
  }
  if (seconds <= 0) return std::numeric_limits<double>::quiet_NaN();
  return busbw_gbps(c, bytes, seconds, ranks);
}

std::string format_duration(double seconds) {
  char buf[64];
  if (!(seconds >= 0)) seconds = 0;
  if (seconds < 60) {
    std::snprintf(buf, sizeof(buf), "%.1f s", seconds);
  } else {
    const long long t = std::llround(seconds), h = t / 3600, m = t / 60 % 60, sec = t % 60;
    if (h == 0) std::snprintf(buf, sizeof(buf), "%lldm%02llds", m, sec);
    else std::snprintf(buf, sizeof(buf), "%lldh%02lldm%02llds", h, m, sec);
  }
  return buf;
}

std::string progress_line(const StepRecord& r, const StepContext& ctx, int total, const char* phase,
                          const Progress& p) {
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "[vitddp] step %d (%d/%d done, %s) elapsed %s, ETA %s, %.2f steps/s, %.1f images/s, loss %.4f, lr %.3g |",
                ctx.step, p.done, total, phase, format_duration(p.elapsed_s).c_str(), format_duration(p.eta_s).c_str(),
                p.steps_per_s, p.images_per_s, r.loss, ctx.lr);
  std::string line = buf;
  std::vector<const SeriesDef*> shown;
  for (const SeriesDef& s : kStepSeries)
    if (s.progress) shown.push_back(&s);
  std::sort(shown.begin(), shown.end(), [](auto a, auto b) { return a->progress_pos < b->progress_pos; });
  for (size_t i = 0; i < shown.size(); ++i) {
    std::snprintf(buf, sizeof(buf), "%s %s %.1f%s", i == 0 ? "" : i == 1 ? "" : ",", shown[i]->progress,
                  shown[i]->get(r, 0) * 1e3, i == 0 ? " ms:" : "");
    line += buf;
  }
  return line;
}

}  // namespace vitddp
