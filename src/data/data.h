// Training data on the host: batches of images and labels produced ahead of time by worker
// threads into a ring of caller-owned buffers (like torch.utils.data.DataLoader with workers).
// Two sources share that one mechanism (PrefetchRing) and differ only in their producer:
//   SyntheticSource  random normal images, uniform labels (the article's FakeDataset)
//   IdxSource        an MNIST-format data set (--data idx:DIR), resized, normalized, split over ranks
// The GPU-side generator (--data device) is cuda/kernels/synthetic_data.h. This code never calls CUDA:
// the caller decides whether the ring buffers are pinned (cudaMallocHost) or pageable.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "src/app/option_enums.h"

namespace vitddp {

struct ViTConfig;

// DataSpec, the parsed value of --data, is defined in src/app/option_enums.h.

/// Parses "synthetic", "device" or "idx:DIR" (DIR non-empty; its existence is checked later by
/// IdxSource). Throws std::invalid_argument whose message starts with "--data" and gives the
/// reason otherwise.
DataSpec parse_data_option(const std::string& value);

/// Shape of one batch: images float32 [batch, channels, height, width] (NCHW, contiguous),
/// labels int32 [batch] in [0, num_classes).
struct BatchShape {
  int batch = 0;
  int channels = 0;
  int height = 0;
  int width = 0;
  int num_classes = 0;

  /// Floats in one image: channels * height * width.
  size_t image_elems() const { return size_t(channels) * height * width; }
  /// Floats in the batch's image tensor: batch * image_elems().
  size_t images_elems() const { return size_t(batch) * image_elems(); }
  /// Bytes of the image tensor (float32).
  size_t images_bytes() const { return images_elems() * sizeof(float); }
  /// Bytes of the label tensor (int32).
  size_t labels_bytes() const { return size_t(batch) * sizeof(int32_t); }
};

/// BatchShape of a model's input: channels and image_size from `cfg`, `batch` images per rank.
BatchShape batch_shape(const ViTConfig& cfg, int batch);

/// One batch in caller-owned host memory. `images` points to BatchShape::images_elems() floats,
/// `labels` to BatchShape::batch int32. `step` is the global step the batch was produced for
/// (counting from 0 at the source's first_step), -1 for an empty ring slot.
struct Batch {
  float* images = nullptr;
  int32_t* labels = nullptr;
  int64_t step = -1;
};

/// Pageable host memory for `count` ring slots of `shape` (CPU backend, tests). A GPU run
/// allocates its slots with cudaMallocHost instead and builds the Batch list itself.
class HostBatchBuffers {
 public:
  HostBatchBuffers(const BatchShape& shape, int count);
  /// Batch views of the buffers (step = -1), to hand to a source; valid while this object lives.
  std::vector<Batch> slots();

 private:
  std::vector<std::vector<float>> images_;
  std::vector<std::vector<int32_t>> labels_;
};

/// Number of prefetched batches a ring of `slots` buffers gives: slots - 1 (the caller holds one
/// batch while the workers fill the others). The default ring has 3 slots: prefetch depth 2.
constexpr int kDefaultRingSlots = 3;

/// Options shared by the host sources.
struct SourceOptions {
  int workers = 4;          ///< producer threads (>= 1)
  int64_t first_step = 0;   ///< step of the first batch next() returns (e.g. when resuming)
};

/// Fills samples [first, first + count) of the batch for `step` into `out` (whose images/labels
/// point to a full batch). Called concurrently from several worker threads for disjoint ranges
/// (and possibly different steps), so it must only read shared state.
using ProduceFn = std::function<void(int64_t step, int first, int count, const Batch& out)>;

/// The prefetching mechanism of every host source: worker threads fill a ring of caller-owned
/// buffers with the batches of consecutive steps, ahead of the consumer. Batch `step` goes to slot
/// step % slots; each batch is cut into min(batch, workers) chunks that workers fill in parallel,
/// so all workers help even with a ring of 2. Slots hold the batch being consumed plus up to
/// slots - 1 prefetched ones.
class PrefetchRing {
 public:
  /// Starts `workers` threads that immediately fill `slots` (>= 2, all non-null) with steps
  /// first_step, first_step + 1, ... Throws std::invalid_argument on bad arguments.
  PrefetchRing(std::vector<Batch> slots, int batch, int workers, int64_t first_step, ProduceFn produce);
  /// Stops and joins the workers (a chunk being produced is finished first).
  ~PrefetchRing();
  PrefetchRing(const PrefetchRing&) = delete;
  PrefetchRing& operator=(const PrefetchRing&) = delete;

  /// Returns the next step's batch, blocking until the workers have finished it, and hands the
  /// slot of the batch returned by the previous call back to the workers. So a returned batch
  /// stays valid and unchanged until the following next() call: the caller must be done reading
  /// it by then (including any asynchronous copy from it). Rethrows the first exception a
  /// producer threw.
  Batch next();

 private:
  void worker();

  const std::vector<Batch> slots_;
  const int batch_;
  const int chunks_;
  const ProduceFn produce_;

  std::mutex mutex_;
  std::condition_variable work_cv_;   // workers wait for a chunk to produce
  std::condition_variable ready_cv_;  // next() waits for a finished batch
  int64_t issue_step_;                // next chunk to hand out: (issue_step_, issue_chunk_)
  int issue_chunk_ = 0;
  int64_t released_;                  // steps < released_ are consumed; their slots may be refilled
  int64_t next_step_;                 // step next() returns
  bool holding_ = false;              // the caller holds step next_step_ - 1
  std::vector<int> chunks_done_;      // per slot, finished chunks of the step it holds
  std::exception_ptr error_;
  bool stop_ = false;
  std::vector<std::thread> threads_;  // last: started after everything above is initialised
};

/// Interface of the host sources, for the trainer.
class HostSource {
 public:
  virtual ~HostSource() = default;
  /// See PrefetchRing::next(): the next batch, valid until the following call.
  virtual Batch next() = 0;
  /// Shape of every batch.
  virtual const BatchShape& shape() const = 0;
  /// Batches per epoch on each rank; 0 for a source without epochs (synthetic).
  virtual int64_t batches_per_epoch() const = 0;
};

/// Random batches like the article's FakeDataset (torch.randn images, torch.randint(0, K)
/// labels), deterministic in (seed, rank, step) and independent of the worker count:
///   image value i of sample n:  synthetic_pixel(seed, rank, step, n * image_elems + i)
///   label of sample n:          synthetic_label(seed, rank, step, n, num_classes)
/// (functions in model/synthetic_data.h, shared with the GPU generator).
class SyntheticSource final : public HostSource {
 public:
  /// `slots`: caller-owned buffers of `shape` (>= 2; kDefaultRingSlots recommended), alive as long
  /// as this source. Throws std::invalid_argument on a bad shape, rank or slot list.
  SyntheticSource(const BatchShape& shape, uint64_t seed, int rank, std::vector<Batch> slots,
                  const SourceOptions& options = {});
  Batch next() override { return ring_.next(); }
  const BatchShape& shape() const override { return shape_; }
  int64_t batches_per_epoch() const override { return 0; }

  /// Fills samples [first, first + count) of `step`'s batch (what the workers call); public for
  /// tests and for filling a batch without threads.
  void produce(int64_t step, int first, int count, const Batch& out) const;

 private:
  const BatchShape shape_;
  const uint64_t seed_;
  const int rank_;
  PrefetchRing ring_;  // last member: its workers use the members above
};

/// An MNIST-format data set in memory (idx3 images uint8 [count, rows, cols], idx1 labels uint8).
struct IdxDataset {
  int64_t count = 0;
  int rows = 0;
  int cols = 0;
  std::vector<uint8_t> pixels;  ///< [count, rows, cols], 0..255
  std::vector<uint8_t> labels;  ///< [count]
  std::string images_path;      ///< the files read (read_idx_dataset), for messages and the output checks
  std::string labels_path;
};

/// Reads DIR/<split>-images-idx3-ubyte and DIR/<split>-labels-idx1-ubyte (split "train" or
/// "t10k"), each either plain or gzip'd with a ".gz" suffix (the plain file wins when both
/// exist). Checks the magic numbers (0x00000803 images, 0x00000801 labels), that the counts
/// match, that the sizes are positive, and that each file holds exactly the bytes its header
/// announces. Throws std::runtime_error naming the directory or file and the problem on any
/// failure (missing directory or file, bad magic, mismatch, truncated file, trailing bytes).
IdxDataset read_idx_dataset(const std::string& dir, const std::string& split);

/// "" when every label of `d` is below `num_classes`, else, for the first one that is not:
/// "label L of sample I in 'LABELS_PATH' does not fit the model's N classes (set --num-classes)"
/// (I: 0-based index of the sample in the file).
std::string label_problem(const IdxDataset& d, int num_classes);

/// Bilinear resize of one single-channel image, [in_h, in_w] -> [out_h, out_w], as
/// torch.nn.functional.interpolate(mode="bilinear", align_corners=False) (no antialias).
void resize_bilinear(const float* in, int in_h, int in_w, float* out, int out_h, int out_w);

/// Options of IdxSource beyond SourceOptions.
struct IdxOptions {
  float mean = 0.2860f;  ///< normalisation: (x - mean) / std with x in [0, 1] (Fashion-MNIST train stats)
  float std = 0.3530f;
};

/// The per-image preprocessing of IdxSource as a reusable object (evaluation batches use it, so
/// test images get exactly the training transform): uint8 / 255 -> bilinear resize rows x cols ->
/// height x width (resize_bilinear) -> (x - mean) / std, repeated over the channels. Stateless
/// after construction, so several threads may share one.
class IdxImageTransform {
 public:
  /// Source images rows x cols, output images as `shape` (channels, height, width). Throws
  /// std::invalid_argument on non-positive sizes or a non-positive / non-finite std.
  IdxImageTransform(int rows, int cols, const BatchShape& shape, const IdxOptions& idx = {});
  /// Writes sample `sample` of `data` (rows x cols must match) to `out`: shape.image_elems()
  /// floats, [channels, height, width]. Throws std::out_of_range for a sample outside [0, count).
  void apply(const IdxDataset& data, int64_t sample, float* out) const;

 private:
  struct Tap {  // bilinear source rows/columns and weights of one output coordinate
    int i0, i1;
    float w0, w1;
  };
  int rows_, cols_, channels_;
  IdxOptions idx_;
  std::vector<Tap> row_taps_, col_taps_;
};

/// Batches of an MNIST-format data set, split over ranks like DistributedSampler(shuffle=True,
/// drop_last=True) followed by a DataLoader(drop_last=True):
///  - per epoch e, a permutation of the N samples from (seed, e), identical on every rank
///    (epoch_permutation);
///  - the first floor(N / world) * world entries are used; rank r takes entries r, r + world,
///    r + 2 world, ...; so ranks never overlap and all run the same number of steps;
///  - batch b of the epoch is B consecutive of the rank's entries, b < batches_per_epoch().
/// Step s is batch s % batches_per_epoch() of epoch s / batches_per_epoch().
/// Each image: uint8 / 255 -> bilinear resize rows x cols -> height x width -> (x - mean) / std,
/// repeated over the channels. Labels as stored (must be < num_classes).
class IdxSource final : public HostSource {
 public:
  /// Throws std::invalid_argument when rank/world are invalid, when N / world < batch (no full
  /// batch per rank), or when a label is >= shape.num_classes.
  IdxSource(std::shared_ptr<const IdxDataset> data, const BatchShape& shape, uint64_t seed, int rank,
            int world, std::vector<Batch> slots, const SourceOptions& options = {},
            const IdxOptions& idx = {});
  Batch next() override { return ring_.next(); }
  const BatchShape& shape() const override { return shape_; }
  int64_t batches_per_epoch() const override { return batches_per_epoch_; }

  /// Data set index of sample `n` of `step`'s batch on this rank.
  int64_t sample_index(int64_t step, int n) const;
  /// Fills samples [first, first + count) of `step`'s batch (what the workers call).
  void produce(int64_t step, int first, int count, const Batch& out) const;

  /// The permutation of [0, n) for `epoch`: Fisher-Yates driven by rand_bits(seed, stream, i) with
  /// stream = 2^63 | epoch. Same on every rank.
  static std::vector<int32_t> epoch_permutation(uint64_t seed, int64_t epoch, int64_t n);

 private:
  std::shared_ptr<const std::vector<int32_t>> permutation(int64_t epoch) const;

  const std::shared_ptr<const IdxDataset> data_;
  const BatchShape shape_;
  const uint64_t seed_;
  const int rank_;
  const int world_;
  const IdxOptions idx_;
  const int64_t batches_per_epoch_;
  struct Tap {  // bilinear source rows/columns and weights of one output coordinate
    int i0, i1;
    float w0, w1;
  };
  std::vector<Tap> rows_, cols_;
  mutable std::mutex perm_mutex_;
  mutable std::map<int64_t, std::shared_ptr<const std::vector<int32_t>>> perms_;  // recent epochs
  PrefetchRing ring_;  // last member: its workers use the members above
};

/// The host source for `spec` (synthetic or idx; for idx the "train" split of spec.dir is read).
/// Throws std::invalid_argument for Kind::device (not a host source) and whatever the
/// constructors and read_idx_dataset throw.
std::unique_ptr<HostSource> make_host_source(const DataSpec& spec, const BatchShape& shape, uint64_t seed,
                                             int rank, int world, std::vector<Batch> slots,
                                             const SourceOptions& options = {}, const IdxOptions& idx = {});

}  // namespace vitddp
