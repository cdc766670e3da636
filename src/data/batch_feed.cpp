#include "src/data/batch_feed.h"

#include <chrono>
#include <cstdio>

#include "src/io/nvtx.h"

namespace vitddp {

std::shared_ptr<const IdxDataset> load_training_data(const Options& o) {
  const DataSpec& spec = o.data;
  if (spec.kind != DataSpec::Kind::idx) return nullptr;
  return std::make_shared<const IdxDataset>(read_idx_dataset(spec.dir, "train"));
}

BatchFeed::BatchFeed(const Options& o, const World& w, const ViTConfig& cfg, Engine& engine,
                     std::shared_ptr<const IdxDataset> data, int64_t first_batch)
    : opts_(o), world_(w), engine_(engine), shape_(batch_shape(cfg, o.batch_size)) {
  const DataSpec& spec = o.data;
  if (spec.kind == DataSpec::Kind::device) return;
  std::vector<Batch> slots;
  for (int s = 0; s < kDefaultRingSlots; ++s) {
    Batch b;
    buffers_.push_back(engine.alloc_host(shape_.images_bytes()));
    b.images = static_cast<float*>(buffers_.back());
    buffers_.push_back(engine.alloc_host(shape_.labels_bytes()));
    b.labels = static_cast<int32_t*>(buffers_.back());
    slots.push_back(b);
  }
  SourceOptions so;
  so.workers = o.data_workers;
  so.first_step = first_batch;
  if (spec.kind == DataSpec::Kind::synthetic) {
    source_ = std::make_unique<SyntheticSource>(shape_, o.seed, w.rank, slots, so);
  } else {
    source_ = std::make_unique<IdxSource>(data, shape_, o.seed, w.rank, w.world_size, slots, so);
    if (w.rank == 0)
      std::printf("[vitddp] %s: %lld training images, %lld batches of %d per rank per epoch\n", spec.dir.c_str(),
                  (long long)data->count, (long long)source_->batches_per_epoch(), o.batch_size);
  }
}

BatchFeed::~BatchFeed() {
  source_.reset();  // joins the workers before their buffers go
  for (void* p : buffers_) engine_.free_host(p);
}

double BatchFeed::stage_next(int64_t step) {
  NvtxRange range("get batch", NvtxColor::Red);
  if (!source_) {
    engine_.stage_generated(opts_.seed, world_.rank, step, opts_.batch_size);
    return 0.0;
  }
  // The previous batch's host buffer goes back to the workers in next(): its copy must be done.
  engine_.wait_staged_copy();
  const auto t0 = std::chrono::steady_clock::now();
  const Batch b = source_->next();
  const double waited = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  engine_.stage(HostBatch{b.images, b.labels, opts_.batch_size});
  return waited;
}

}  // namespace vitddp
