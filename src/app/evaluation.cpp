#include "src/app/evaluation.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "src/io/nvtx.h"
#include "src/io/results_h5.h"
#include "src/io/series.h"

namespace vitddp {

EvalShard eval_shard(int64_t n, int rank, int world) {
  if (n < 0 || world < 1 || rank < 0 || rank >= world)
    throw std::invalid_argument("eval_shard: needs n >= 0 and 0 <= rank < world; got n " + std::to_string(n) +
                                ", rank " + std::to_string(rank) + ", world " + std::to_string(world));
  // n * (rank + 1) fits in int64 for any data set this program reads (n < 2^31, world < 2^31).
  EvalShard s;
  s.begin = n * rank / world;
  s.end = n * (rank + 1) / world;
  return s;
}

std::vector<EvalShard> eval_batches(const EvalShard& shard, int batch) {
  if (batch < 1) throw std::invalid_argument("eval_batches: batch must be >= 1, got " + std::to_string(batch));
  std::vector<EvalShard> out;
  for (int64_t first = shard.begin; first < shard.end; first += batch)
    out.push_back(EvalShard{first, std::min<int64_t>(first + batch, shard.end)});
  return out;
}

bool eval_due(int every, int step, int total) {
  if (every <= 0 || step < 1) return false;
  return step % every == 0 || step == total;
}

EvalResult logits_metrics(const double* logits, const int32_t* labels, int batch, int classes) {
  EvalResult r;
  for (int b = 0; b < batch; ++b) {
    const double* z = logits + (size_t)b * classes;
    const int label = labels[b];
    if (label < 0 || label >= classes)
      throw std::invalid_argument("logits_metrics: label " + std::to_string(label) + " of sample " +
                                  std::to_string(b) + " outside [0, " + std::to_string(classes) + ")");
    int arg = 0;
    for (int k = 1; k < classes; ++k)
      if (z[k] > z[arg]) arg = k;
    double s = 0;
    for (int k = 0; k < classes; ++k) s += std::exp(z[k] - z[arg]);
    r.loss_sum += std::log(s) + z[arg] - z[label];
    r.correct += arg == label ? 1 : 0;
  }
  r.count = batch;
  return r;
}

EvalResult allreduce_eval(const EvalResult& local) {
  if (!mpi_active()) return local;
  EvalResult out;
  int64_t counts[2] = {local.correct, local.count}, sums[2] = {0, 0};
  MPI_CHECK(MPI_Allreduce(&local.loss_sum, &out.loss_sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
  MPI_CHECK(MPI_Allreduce(counts, sums, 2, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD));
  out.correct = sums[0];
  out.count = sums[1];
  return out;
}

std::string idx_split_prefix(const std::string& eval_split) {
  if (eval_split == "test") return "t10k";
  if (eval_split == "train") return "train";
  throw std::invalid_argument("--eval-split: unknown value '" + eval_split + "' (choose one of: test, train)");
}

std::shared_ptr<const IdxDataset> load_eval_data(const Options& o, std::shared_ptr<const IdxDataset> training,
                                                 int num_classes) {
  if (o.eval_every <= 0) return nullptr;
  const DataSpec& spec = o.data;
  if (spec.kind != DataSpec::Kind::idx)
    throw std::invalid_argument("--eval-every: --eval-split " + to_string(o.eval_split) + " needs --data idx:DIR");
  const std::string prefix = idx_split_prefix(to_string(o.eval_split));
  std::shared_ptr<const IdxDataset> split;
  if (o.eval_split == EvalSplit::Train && training) {
    split = std::move(training);
  } else {
    try {
      split = std::make_shared<const IdxDataset>(read_idx_dataset(spec.dir, prefix));
    } catch (const std::exception& e) {
      throw std::runtime_error("--eval-split " + to_string(o.eval_split) + ": " + e.what());
    }
  }
  if (const std::string e = label_problem(*split, num_classes); !e.empty())
    throw std::runtime_error("--eval-split " + to_string(o.eval_split) + ": " + e);
  return split;
}

namespace {

const IdxDataset& checked_split(const std::shared_ptr<const IdxDataset>& split) {
  if (!split) throw std::invalid_argument("Evaluator: no data set to evaluate");
  return *split;
}

}  // namespace

Evaluator::Evaluator(std::shared_ptr<const IdxDataset> split, const ViTConfig& cfg, int batch, const World& w,
                     Engine& engine, ResultsFile* results)
    : split_(std::move(split)),
      shape_(batch_shape(cfg, batch)),
      world_(w),
      engine_(engine),
      results_(results),
      shard_(eval_shard(checked_split(split_).count, w.rank, w.world_size)),
      transform_(split_->rows, split_->cols, shape_) {
  if (batch < 1) throw std::invalid_argument("Evaluator: batch must be >= 1, got " + std::to_string(batch));
  images_ = static_cast<float*>(engine_.alloc_host(shape_.images_bytes()));
  labels_ = static_cast<int32_t*>(engine_.alloc_host(shape_.labels_bytes()));
  if (results_)
    create_eval_series(*results_);
}

Evaluator::~Evaluator() {
  engine_.free_host(images_);
  engine_.free_host(labels_);
}

EvalResult Evaluator::run(int step, double* seconds) {
  NvtxRange range("evaluate", NvtxColor::Green);
  const auto t0 = std::chrono::steady_clock::now();
  EvalResult local;
  for (const EvalShard& range : eval_batches(shard_, shape_.batch)) {
    const int n = (int)range.size();
    for (int i = 0; i < n; ++i) {
      transform_.apply(*split_, range.begin + i, images_ + (size_t)i * shape_.image_elems());
      labels_[i] = split_->labels[(size_t)(range.begin + i)];
    }
    const EvalResult r = engine_.evaluate(HostBatch{images_, labels_, n});
    local.loss_sum += r.loss_sum;
    local.correct += r.correct;
    local.count += r.count;
  }
  const EvalResult total = allreduce_eval(local);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (seconds) *seconds = s;
  if (results_) {
    append_eval_series(*results_, EvalSample{step, total, s});
    results_->flush();
  }
  if (world_.rank == 0) {
    std::printf("[vitddp] eval after step %d: top-1 %.2f%% (%lld/%lld), loss %.4f, %.1f s\n", step,
                100.0 * total.accuracy(), (long long)total.correct, (long long)total.count, total.mean_loss(), s);
    std::fflush(stdout);
  }
  return total;
}

}  // namespace vitddp
