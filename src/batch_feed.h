// Connects a data source (src/data.h) to an Engine: host batches in engine-allocated (pinned)
// buffers, or batches generated on the device.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "model/vit_config.h"
#include "mpi/world.h"
#include "src/data.h"
#include "src/engine.h"
#include "src/options.h"

namespace vitddp {

/// Owns the data source of opts.data ("synthetic", "device" or "idx:DIR", training split) and its
/// ring of host buffers (Engine::alloc_host: pinned memory on the GPU backend).
class BatchFeed {
 public:
  /// Throws std::runtime_error when the data set cannot be read (names the file and problem).
  BatchFeed(const Options& opts, const World& w, const ViTConfig& cfg, Engine& engine);
  ~BatchFeed();
  BatchFeed(const BatchFeed&) = delete;
  BatchFeed& operator=(const BatchFeed&) = delete;

  /// Takes the batch of `step` from the source (blocking until its workers have it) and stages it
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
