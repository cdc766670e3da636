// Connects a data source (src/data/data.h) to an Engine: host batches in engine-allocated (pinned)
// buffers, or batches generated on the device.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "model/vit_config.h"
#include "mpi/world/world.h"
#include "src/data/data.h"
#include "src/engines/engine.h"
#include "src/app/options.h"

namespace vitddp {

/// For --data idx:DIR, reads the training split (read_idx_dataset(dir, "train")); null for the
/// other sources. Throws std::runtime_error naming the file and the problem.
std::shared_ptr<const IdxDataset> load_training_data(const Options& opts);

/// Owns the data source of opts.data ("synthetic", "device" or "idx:DIR", training split) and its
/// ring of host buffers (Engine::alloc_host: pinned memory on the GPU backend).
class BatchFeed {
 public:
  /// `dataset` is the training split for --data idx:DIR (load_training_data), null otherwise.
  /// `first_batch` is the index of the first batch the source produces (0, or the batches a
  /// resumed run's checkpoint consumed): every source derives batch b from (seed, rank, b) alone
  /// (IDX: epoch b / batches_per_epoch), so the same index gives the same batch.
  /// Throws std::invalid_argument when the data set does not fit the model (labels >= classes)
  /// or has fewer samples per rank than a batch.
  BatchFeed(const Options& opts, const World& w, const ViTConfig& cfg, Engine& engine,
            std::shared_ptr<const IdxDataset> dataset, int64_t first_batch = 0);
  ~BatchFeed();
  BatchFeed(const BatchFeed&) = delete;
  BatchFeed& operator=(const BatchFeed&) = delete;

  /// Takes the batch of `step` (the batch index: first_batch, first_batch + 1, ... in order) from the source (blocking until its workers have it) and stages it
  /// on the engine (an asynchronous copy on the GPU backend). Returns the milliseconds spent
  /// blocked on the source: the data wait of that step. The batch's host buffer is handed back to
  /// the workers by the following call, after the engine finished the step that used it.
  double stage_next(int64_t step);

  /// Batches per epoch per rank for idx data (0 for endless synthetic sources).
  int64_t batches_per_epoch() const { return source_ ? source_->batches_per_epoch() : 0; }

 private:
  Options opts_;
  World world_;
  Engine& engine_;
  BatchShape shape_;
  std::vector<void*> buffers_;
  std::unique_ptr<HostSource> source_;  // null for --data device
};

}  // namespace vitddp
