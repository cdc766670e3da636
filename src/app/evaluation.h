// The evaluation pass (--eval-every, --eval-split): top-1 accuracy and mean cross-entropy of the
// current parameters over a whole IDX split, each sample counted once across ranks.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/vit_config.h"
#include "mpi/world/world.h"
#include "src/data/data.h"
#include "src/engines/engine.h"
#include "src/app/options.h"

namespace vitddp {

class ResultsFile;

/// The samples [begin, end) of a split that one rank evaluates.
struct EvalShard {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};

/// Contiguous, balanced sharding of `n` samples over `world` ranks: rank r gets
/// [floor(n r / world), floor(n (r + 1) / world)). The shards of ranks 0..world-1 are adjacent and
/// cover [0, n) exactly once, whatever n, world and the batch size (their sizes differ by at most
/// one; a rank gets an empty shard when n < world). Throws std::invalid_argument when n < 0,
/// world < 1 or rank is outside [0, world).
EvalShard eval_shard(int64_t n, int rank, int world);

/// The batches one rank evaluates its shard in: consecutive ranges of `batch` samples from
/// shard.begin, the last one shorter when shard.size() is not a multiple of `batch` (nothing is
/// dropped, padded or repeated); none for an empty shard. Throws std::invalid_argument when
/// batch < 1.
std::vector<EvalShard> eval_batches(const EvalShard& shard, int batch);

/// True when an evaluation runs once `step` optimizer steps are done (a count: after step index step - 1)
/// of a run of `total` steps: every `every`-th step and after the last one; never when every <= 0.
bool eval_due(int every, int step, int total);

/// Metrics of one batch of logits, accumulated in double: loss_sum = sum_b (logsumexp(z_b) -
/// z_b[label_b]) (torch.nn.CrossEntropyLoss with reduction='sum'), correct = #{b : argmax z_b ==
/// label_b} (first maximum on ties, as torch.argmax), count = batch. logits [batch, classes]
/// row-major. Throws std::invalid_argument for a label outside [0, classes).
EvalResult logits_metrics(const double* logits, const int32_t* labels, int batch, int classes);

/// Element-wise sum of every rank's result (MPI_Allreduce, MPI_SUM; loss in double, counts in
/// int64). Without MPI (unit tests) returns `local`. Every rank must call it.
EvalResult allreduce_eval(const EvalResult& local);

/// "test" -> the IDX split file prefix "t10k"; "train" -> "train". Throws std::invalid_argument
/// naming --eval-split otherwise.
std::string idx_split_prefix(const std::string& eval_split);

/// The data set that --eval-every evaluates, or null when opts.eval_every == 0: --eval-split test
/// reads DIR/t10k-{images-idx3,labels-idx1}-ubyte[.gz] next to the training files of --data
/// idx:DIR (read_idx_dataset, plain or gzip'd); --eval-split train returns `training` (the
/// training split as loaded, after --data-limit). Throws std::runtime_error starting with
/// "--eval-split" and naming the file and problem when the split cannot be read, or a label does
/// not fit `num_classes`; std::invalid_argument when --data is not idx:DIR.
std::shared_ptr<const IdxDataset> load_eval_data(const Options& opts, std::shared_ptr<const IdxDataset> training,
                                                 int num_classes);

/// Runs the evaluation pass of one rank and records it. The rank's shard (eval_shard) is cut into
/// consecutive batches of `batch` samples, the last one smaller when the shard size is not a
/// multiple (no sample dropped, padded or repeated); each batch is preprocessed exactly as
/// training batches (IdxImageTransform with the default IdxOptions) into host buffers from
/// Engine::alloc_host and given to Engine::evaluate. The ranks' results are summed with
/// allreduce_eval. Rank 0 appends eval/step, eval/accuracy, eval/loss, eval/samples and
/// eval/time (docs/schema.md) to the results file, flushes it, and prints
/// "[vitddp] eval after step S: top-1 87.12% (8712/10000), loss 0.3521, 1.2 s".
class Evaluator {
 public:
  /// `split`: the data set (shared, kept alive); `results`: rank 0's file (null on other ranks): the
  /// eval/* series are created in it here. Throws std::invalid_argument when batch < 1.
  Evaluator(std::shared_ptr<const IdxDataset> split, const ViTConfig& cfg, int batch, const World& w,
            Engine& engine, ResultsFile* results);
  ~Evaluator();
  Evaluator(const Evaluator&) = delete;
  Evaluator& operator=(const Evaluator&) = delete;

  /// Evaluates the engine's current parameters after step `step` (0-based, as the results file's
  /// step axis; recorded as eval/step) on every
  /// rank (collective: every rank must call it), records and prints the result on rank 0, and
  /// returns the reduced result (the same on every rank). `*seconds` (may be null) receives the
  /// host wall time of the pass, MPI reduction included.
  EvalResult run(int step, double* seconds = nullptr);

  /// This rank's shard of the split.
  const EvalShard& shard() const { return shard_; }

 private:
  std::shared_ptr<const IdxDataset> split_;
  BatchShape shape_;
  World world_;
  Engine& engine_;
  ResultsFile* results_;
  EvalShard shard_;
  IdxImageTransform transform_;
  float* images_ = nullptr;    // engine host buffer: batch images
  int32_t* labels_ = nullptr;  // engine host buffer: batch labels
};

}  // namespace vitddp
