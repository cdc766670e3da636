#include "src/data/data.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <utility>

#include "model/synthetic_data.h"  // synthetic_pixel / synthetic_label: host-callable, no CUDA calls
#include "model/rng.h"
#include "model/vit_config.h"

namespace vitddp {

// ---------------------------------------------------------------- --data option

DataSpec parse_data_option(const std::string& value) {
  DataSpec spec;
  if (value == "synthetic") {
    spec.kind = DataSpec::Kind::synthetic;
  } else if (value == "device") {
    spec.kind = DataSpec::Kind::device;
  } else if (value.rfind("idx:", 0) == 0) {
    spec.kind = DataSpec::Kind::idx;
    spec.dir = value.substr(4);
    if (spec.dir.empty())
      throw std::invalid_argument("--data: 'idx:' needs a directory of MNIST-format files, as in "
                                  "idx:/usr/share/datasets/fashion-mnist");
  } else {
    throw std::invalid_argument("--data: expected 'synthetic', 'device' or 'idx:DIR', got '" + value + "'");
  }
  return spec;
}

// ---------------------------------------------------------------- shapes and buffers

BatchShape batch_shape(const ViTConfig& cfg, int batch) {
  BatchShape s;
  s.batch = batch;
  s.channels = cfg.channels;
  s.height = cfg.image_size;
  s.width = cfg.image_size;
  s.num_classes = cfg.num_classes;
  return s;
}

namespace {

const BatchShape& checked_shape(const BatchShape& s, const char* who) {
  if (s.batch < 1 || s.channels < 1 || s.height < 1 || s.width < 1 || s.num_classes < 1)
    throw std::invalid_argument(std::string(who) + ": batch shape needs batch, channels, height, width and "
                                "num_classes >= 1; got " + std::to_string(s.batch) + ", " + std::to_string(s.channels) +
                                ", " + std::to_string(s.height) + ", " + std::to_string(s.width) + ", " +
                                std::to_string(s.num_classes));
  return s;
}

int checked_rank(int rank, int world, const char* who) {
  if (world < 1 || rank < 0 || rank >= world || rank >= 65536)
    throw std::invalid_argument(std::string(who) + ": needs 0 <= rank < world (and rank < 65536); got rank " +
                                std::to_string(rank) + " of " + std::to_string(world));
  return rank;
}

}  // namespace

HostBatchBuffers::HostBatchBuffers(const BatchShape& shape, int count) {
  checked_shape(shape, "HostBatchBuffers");
  if (count < 1) throw std::invalid_argument("HostBatchBuffers: count must be >= 1");
  for (int i = 0; i < count; ++i) {
    images_.emplace_back(shape.images_elems());
    labels_.emplace_back(shape.batch);
  }
}

std::vector<Batch> HostBatchBuffers::slots() {
  std::vector<Batch> out;
  for (size_t i = 0; i < images_.size(); ++i) out.push_back(Batch{images_[i].data(), labels_[i].data(), -1});
  return out;
}

// ---------------------------------------------------------------- PrefetchRing

PrefetchRing::PrefetchRing(std::vector<Batch> slots, int batch, int workers, int64_t first_step, ProduceFn produce)
    : slots_(std::move(slots)),
      batch_(batch),
      chunks_(std::max(1, std::min(batch, workers))),
      produce_(std::move(produce)),
      issue_step_(first_step),
      released_(first_step),
      next_step_(first_step),
      chunks_done_(slots_.size(), 0) {
  if (slots_.size() < 2) throw std::invalid_argument("PrefetchRing: needs at least 2 slots, got " + std::to_string(slots_.size()));
  for (const Batch& b : slots_)
    if (!b.images || !b.labels) throw std::invalid_argument("PrefetchRing: a slot has a null images or labels pointer");
  if (batch < 1 || workers < 1 || first_step < 0 || !produce_)
    throw std::invalid_argument("PrefetchRing: needs batch >= 1, workers >= 1, first_step >= 0 and a producer; got batch " +
                                std::to_string(batch) + ", workers " + std::to_string(workers) + ", first_step " +
                                std::to_string(first_step));
  try {
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { worker(); });
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (auto& t : threads_) t.join();
    throw;
  }
}

PrefetchRing::~PrefetchRing() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void PrefetchRing::worker() {
  const int64_t n_slots = static_cast<int64_t>(slots_.size());
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    work_cv_.wait(lock, [&] { return stop_ || (!error_ && issue_step_ < released_ + n_slots); });
    if (stop_) return;
    const int64_t step = issue_step_;
    const int chunk = issue_chunk_;
    if (++issue_chunk_ == chunks_) {
      issue_chunk_ = 0;
      ++issue_step_;
    }
    lock.unlock();

    const size_t slot = static_cast<size_t>(step % n_slots);
    Batch out = slots_[slot];
    out.step = step;
    const int first = static_cast<int>(int64_t{batch_} * chunk / chunks_);
    const int last = static_cast<int>(int64_t{batch_} * (chunk + 1) / chunks_);
    std::exception_ptr err;
    try {
      produce_(step, first, last - first, out);
    } catch (...) {
      err = std::current_exception();
    }

    lock.lock();
    if (err && !error_) error_ = err;
    if (++chunks_done_[slot] == chunks_ || err) ready_cv_.notify_all();
  }
}

Batch PrefetchRing::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (holding_) {  // the batch returned last time is done with: its slot may be refilled
    released_ = next_step_;
    holding_ = false;
    work_cv_.notify_all();
  }
  const size_t slot = static_cast<size_t>(next_step_ % static_cast<int64_t>(slots_.size()));
  ready_cv_.wait(lock, [&] { return error_ || chunks_done_[slot] == chunks_; });
  if (error_) std::rethrow_exception(error_);
  chunks_done_[slot] = 0;
  holding_ = true;
  Batch b = slots_[slot];
  b.step = next_step_++;
  return b;
}

// ---------------------------------------------------------------- SyntheticSource

SyntheticSource::SyntheticSource(const BatchShape& shape, uint64_t seed, int rank, std::vector<Batch> slots,
                                 const SourceOptions& options)
    : shape_(checked_shape(shape, "SyntheticSource")),
      seed_(seed),
      rank_(rank >= 0 && rank < 65536 ? rank
                                      : throw std::invalid_argument("SyntheticSource: needs 0 <= rank < 65536, got " +
                                                                    std::to_string(rank))),
      ring_(std::move(slots), shape.batch, options.workers, options.first_step,
            [this](int64_t step, int first, int count, const Batch& out) { produce(step, first, count, out); }) {}

void SyntheticSource::produce(int64_t step, int first, int count, const Batch& out) const {
  const uint64_t elems = shape_.image_elems();
  uint64_t i = static_cast<uint64_t>(first) * elems;
  const uint64_t end = static_cast<uint64_t>(first + count) * elems;
  // Values come in pairs (2p, 2p+1) from one draw; a range may start or end inside a pair.
  if (i < end && (i & 1)) {
    out.images[i] = synthetic_pixel(seed_, rank_, step, i);
    ++i;
  }
  for (; i + 1 < end; i += 2) synthetic_normal_pair(seed_, rank_, step, i >> 1, &out.images[i], &out.images[i + 1]);
  if (i < end) out.images[i] = synthetic_pixel(seed_, rank_, step, i);
  for (int n = first; n < first + count; ++n) out.labels[n] = synthetic_label(seed_, rank_, step, n, shape_.num_classes);
}

// ---------------------------------------------------------------- IDX files

namespace {

// One IDX file opened through zlib (gzread reads plain files transparently).
class GzFile {
 public:
  explicit GzFile(const std::string& path) : path_(path) {
    errno = 0;
    f_ = gzopen(path.c_str(), "rb");
    if (!f_)
      throw std::runtime_error("IDX file '" + path + "': cannot open: " +
                               (errno ? std::strerror(errno) : "zlib could not allocate its state"));
    gzbuffer(f_, 1 << 18);
  }
  ~GzFile() {
    if (f_) gzclose(f_);
  }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;

  // Reads up to n bytes; returns how many were read (< n only at end of file). Throws on a
  // decompression or read error.
  size_t read(void* dst, size_t n) {
    size_t done = 0;
    while (done < n) {
      const unsigned want = static_cast<unsigned>(std::min<size_t>(n - done, 1u << 30));
      const int got = gzread(f_, static_cast<char*>(dst) + done, want);
      if (got < 0) {
        int code = 0;
        const char* msg = gzerror(f_, &code);
        throw std::runtime_error("IDX file '" + path_ + "': read error: " + (msg ? msg : "unknown zlib error"));
      }
      if (got == 0) break;
      done += static_cast<size_t>(got);
    }
    return done;
  }

  // Reads exactly n bytes of `what`, else throws naming the file and how much was missing. A
  // piece of a larger read: `before` bytes of `what` already read, `total` expected in all (the
  // message counts those).
  void read_exact(void* dst, size_t n, const std::string& what, size_t before = 0, size_t total = 0) {
    const size_t got = read(dst, n);
    if (got != n)
      throw std::runtime_error("IDX file '" + path_ + "' is truncated: expected " +
                               std::to_string(total ? total : before + n) + " bytes of " + what + ", got " +
                               std::to_string(before + got));
  }

  // Throws unless the file has no byte left.
  void expect_end() {
    char extra;
    if (read(&extra, 1) != 0)
      throw std::runtime_error("IDX file '" + path_ + "' has trailing bytes after the data its header announces");
  }

 private:
  std::string path_;
  gzFile f_ = nullptr;
};

uint32_t big_endian_u32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// Whether the IDX file at `path` can hold `bytes` bytes: a plain file of at least that size, or a
// gzip file (magic 1f 8b) whose trailer ISIZE (RFC 1952: the uncompressed size mod 2^32, little
// endian, its last 4 bytes) equals bytes mod 2^32. False when unsure (the reader then grows its
// buffer as the bytes arrive).
bool idx_claim_fits(const std::string& path, uint64_t bytes) {
  std::ifstream f(path, std::ios::binary);
  unsigned char magic[2] = {0, 0};
  if (!f.read(reinterpret_cast<char*>(magic), 2)) return false;
  f.seekg(0, std::ios::end);
  const std::streamoff size = f.tellg();
  if (magic[0] != 0x1f || magic[1] != 0x8b) return size >= 0 && static_cast<uint64_t>(size) >= bytes;
  unsigned char t[4];
  if (size < 18 || !f.seekg(size - 4).read(reinterpret_cast<char*>(t), 4)) return false;
  const uint32_t isize = uint32_t{t[0]} | uint32_t{t[1]} << 8 | uint32_t{t[2]} << 16 | uint32_t{t[3]} << 24;
  return isize == static_cast<uint32_t>(bytes);
}

// DIR/name, else DIR/name.gz, else a runtime_error naming both.
std::string find_idx_file(const std::string& dir, const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path plain = fs::path(dir) / name;
  const fs::path gz = fs::path(dir) / (name + ".gz");
  std::error_code ec;
  if (fs::is_regular_file(plain, ec)) return plain.string();
  if (fs::is_regular_file(gz, ec)) return gz.string();
  throw std::runtime_error("IDX data: neither '" + plain.string() + "' nor '" + gz.string() + "' exists");
}

}  // namespace

namespace {
/// Throws std::runtime_error naming `path` when the header's big-endian magic number is not `expected`.
void check_idx_magic(const unsigned char* header, uint32_t expected, const char* kind, const std::string& path) {
  const uint32_t magic = big_endian_u32(header);
  if (magic == expected) return;
  char buf[112];
  std::snprintf(buf, sizeof buf, "bad magic number 0x%08x (expected 0x%08x, %s)", magic, expected, kind);
  throw std::runtime_error("IDX file '" + path + "': " + buf);
}
}  // namespace

IdxDataset read_idx_dataset(const std::string& dir, const std::string& split) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(dir, ec)) throw std::runtime_error("IDX data directory '" + dir + "' does not exist");
  if (!fs::is_directory(dir, ec)) throw std::runtime_error("IDX data directory '" + dir + "' is not a directory");
  if (split != "train" && split != "t10k")
    throw std::invalid_argument("read_idx_dataset: split must be 'train' or 't10k', got '" + split + "'");

  IdxDataset d;
  const std::string images_path = find_idx_file(dir, split + "-images-idx3-ubyte");
  const std::string labels_path = find_idx_file(dir, split + "-labels-idx1-ubyte");
  d.images_path = images_path;
  d.labels_path = labels_path;
  {
    GzFile f(images_path);
    unsigned char h[16];
    f.read_exact(h, sizeof h, "header");
    check_idx_magic(h, 0x00000803u, "idx3 ubyte images", images_path);
    const uint32_t count = big_endian_u32(h + 4), rows = big_endian_u32(h + 8), cols = big_endian_u32(h + 12);
    if (count == 0 || rows == 0 || cols == 0 || count > (1u << 31) - 1 || rows > 65536 || cols > 65536 ||
        uint64_t{count} * rows * cols > (uint64_t{1} << 36))
      throw std::runtime_error("IDX file '" + images_path + "': implausible sizes " + std::to_string(count) + " x " +
                               std::to_string(rows) + " x " + std::to_string(cols));
    d.count = count;
    d.rows = static_cast<int>(rows);
    d.cols = static_cast<int>(cols);
    // Allocated at once when the file can hold what the header claims (a plain file at least that
    // long; a gzip stream whose trailer, the uncompressed size mod 2^32, agrees); else grown as the
    // bytes arrive (64 MiB at a time), so a header that claims more than the file holds fails on
    // its first missing byte instead of first allocating the claim.
    const size_t want = size_t{count} * rows * cols;
    if (idx_claim_fits(images_path, 16 + uint64_t{want})) d.pixels.resize(want);
    for (size_t done = 0; done < want;) {
      const size_t n = std::min<size_t>(want - done, size_t{64} << 20);
      if (d.pixels.size() < done + n) d.pixels.resize(done + n);
      f.read_exact(d.pixels.data() + done, n, "pixels", done, want);
      done += n;
    }
    f.expect_end();
  }
  {
    GzFile f(labels_path);
    unsigned char h[8];
    f.read_exact(h, sizeof h, "header");
    check_idx_magic(h, 0x00000801u, "idx1 ubyte labels", labels_path);
    const uint32_t count = big_endian_u32(h + 4);
    if (count != d.count)
      throw std::runtime_error("IDX file '" + labels_path + "' holds " + std::to_string(count) + " labels but '" +
                               images_path + "' holds " + std::to_string(d.count) + " images");
    d.labels.resize(count);
    f.read_exact(d.labels.data(), d.labels.size(), "labels");
    f.expect_end();
  }
  return d;
}

std::string label_problem(const IdxDataset& d, int num_classes) {
  for (size_t i = 0; i < d.labels.size(); ++i)
    if (d.labels[i] >= num_classes)
      return "label " + std::to_string(d.labels[i]) + " of sample " + std::to_string(i) + " in '" + d.labels_path +
             "' does not fit the model's " + std::to_string(num_classes) + " classes (set --num-classes)";
  return "";
}

// ---------------------------------------------------------------- bilinear resize

namespace {

struct Tap {
  int i0, i1;
  float w0, w1;
};

// Source taps of each output coordinate, as PyTorch's upsample_bilinear2d with
// align_corners=False and no scale factor: src = (dst + 0.5) * in/out - 0.5, clamped at 0.
template <class T>
std::vector<T> bilinear_taps(int in, int out) {
  std::vector<T> taps(out);
  const float scale = static_cast<float>(in) / static_cast<float>(out);
  for (int o = 0; o < out; ++o) {
    float src = scale * (o + 0.5f) - 0.5f;
    if (src < 0) src = 0;
    const int i0 = std::min(static_cast<int>(src), in - 1);
    const int i1 = i0 + (i0 < in - 1 ? 1 : 0);
    const float w1 = src - i0;
    taps[o] = T{i0, i1, 1.0f - w1, w1};
  }
  return taps;
}

template <class T>
void resize_with_taps(const float* in, int in_w, float* out, const std::vector<T>& rows, const std::vector<T>& cols) {
  const int out_w = static_cast<int>(cols.size());
  for (size_t y = 0; y < rows.size(); ++y) {
    const T& ty = rows[y];
    const float* r0 = in + static_cast<size_t>(ty.i0) * in_w;
    const float* r1 = in + static_cast<size_t>(ty.i1) * in_w;
    float* o = out + y * out_w;
    for (int x = 0; x < out_w; ++x) {
      const T& tx = cols[x];
      o[x] = ty.w0 * (tx.w0 * r0[tx.i0] + tx.w1 * r0[tx.i1]) + ty.w1 * (tx.w0 * r1[tx.i0] + tx.w1 * r1[tx.i1]);
    }
  }
}

}  // namespace

void resize_bilinear(const float* in, int in_h, int in_w, float* out, int out_h, int out_w) {
  if (in_h < 1 || in_w < 1 || out_h < 1 || out_w < 1)
    throw std::invalid_argument("resize_bilinear: sizes must be >= 1");
  resize_with_taps(in, in_w, out, bilinear_taps<Tap>(in_h, out_h), bilinear_taps<Tap>(in_w, out_w));
}

// ---------------------------------------------------------------- IdxSource

namespace {

int64_t idx_batches_per_epoch(const IdxDataset* d, const BatchShape& shape, int rank, int world) {
  if (!d) throw std::invalid_argument("IdxSource: no data set");
  checked_rank(rank, world, "IdxSource");
  const int64_t per_rank = d->count / world;
  const int64_t batches = per_rank / std::max(shape.batch, 1);
  if (batches < 1)
    throw std::invalid_argument("IdxSource: " + std::to_string(d->count) + " samples over " + std::to_string(world) +
                                " ranks give " + std::to_string(per_rank) + " per rank, less than one batch of " +
                                std::to_string(shape.batch));
  if (d->pixels.size() != static_cast<size_t>(d->count) * d->rows * d->cols || d->labels.size() != static_cast<size_t>(d->count))
    throw std::invalid_argument("IdxSource: data set arrays do not match its count/rows/cols");
  const int max_label = *std::max_element(d->labels.begin(), d->labels.end());
  if (max_label >= shape.num_classes)
    throw std::invalid_argument("IdxSource: the data set has label " + std::to_string(max_label) +
                                " but the model has only " + std::to_string(shape.num_classes) + " classes");
  return batches;
}

const IdxOptions& checked_idx_options(const IdxOptions& o) {
  if (!(o.std > 0) || !std::isfinite(o.std) || !std::isfinite(o.mean))
    throw std::invalid_argument("IdxSource: normalisation needs a finite mean and std > 0; got mean " +
                                std::to_string(o.mean) + ", std " + std::to_string(o.std));
  return o;
}

}  // namespace

IdxSource::IdxSource(std::shared_ptr<const IdxDataset> data, const BatchShape& shape, uint64_t seed, int rank,
                     int world, std::vector<Batch> slots, const SourceOptions& options, const IdxOptions& idx)
    : data_(std::move(data)),
      shape_(checked_shape(shape, "IdxSource")),
      seed_(seed),
      rank_(rank),
      world_(world),
      idx_(checked_idx_options(idx)),
      batches_per_epoch_(idx_batches_per_epoch(data_.get(), shape_, rank, world)),
      rows_(bilinear_taps<Tap>(data_->rows, shape_.height)),
      cols_(bilinear_taps<Tap>(data_->cols, shape_.width)),
      ring_(std::move(slots), shape.batch, options.workers, options.first_step,
            [this](int64_t step, int first, int count, const Batch& out) { produce(step, first, count, out); }) {}

std::vector<int32_t> IdxSource::epoch_permutation(uint64_t seed, int64_t epoch, int64_t n) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<int32_t>(i);
  const uint64_t stream = (uint64_t{1} << 63) | static_cast<uint64_t>(epoch);
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(rand_bits(seed, stream, static_cast<uint64_t>(i)) % static_cast<uint64_t>(i + 1));
    std::swap(p[i], p[j]);
  }
  return p;
}

std::shared_ptr<const std::vector<int32_t>> IdxSource::permutation(int64_t epoch) const {
  std::lock_guard<std::mutex> lock(perm_mutex_);
  auto it = perms_.find(epoch);
  if (it != perms_.end()) return it->second;
  auto p = std::make_shared<const std::vector<int32_t>>(epoch_permutation(seed_, epoch, data_->count));
  perms_.emplace(epoch, p);
  while (perms_.size() > 4) perms_.erase(perms_.begin());  // oldest epochs; holders keep theirs alive
  return p;
}

int64_t IdxSource::sample_index(int64_t step, int n) const {
  const int64_t epoch = step / batches_per_epoch_;
  const int64_t b = step % batches_per_epoch_;
  const int64_t pos = (b * shape_.batch + n) * world_ + rank_;
  return (*permutation(epoch))[static_cast<size_t>(pos)];
}

void IdxSource::produce(int64_t step, int first, int count, const Batch& out) const {
  const int64_t epoch = step / batches_per_epoch_;
  const int64_t b = step % batches_per_epoch_;
  const auto perm = permutation(epoch);
  const size_t in_elems = static_cast<size_t>(data_->rows) * data_->cols;
  const size_t plane = static_cast<size_t>(shape_.height) * shape_.width;
  std::vector<float> in(in_elems);
  const float inv_std = 1.0f / idx_.std;
  for (int n = first; n < first + count; ++n) {
    const int64_t pos = (b * shape_.batch + n) * world_ + rank_;
    const int64_t sample = (*perm)[static_cast<size_t>(pos)];
    const uint8_t* px = data_->pixels.data() + static_cast<size_t>(sample) * in_elems;
    for (size_t i = 0; i < in_elems; ++i) in[i] = px[i] / 255.0f;
    float* img = out.images + static_cast<size_t>(n) * shape_.image_elems();
    resize_with_taps(in.data(), data_->cols, img, rows_, cols_);
    for (size_t i = 0; i < plane; ++i) img[i] = (img[i] - idx_.mean) * inv_std;
    for (int c = 1; c < shape_.channels; ++c) std::copy(img, img + plane, img + c * plane);
    out.labels[n] = data_->labels[static_cast<size_t>(sample)];
  }
}

// ---------------------------------------------------------------- IdxImageTransform

IdxImageTransform::IdxImageTransform(int rows, int cols, const BatchShape& shape, const IdxOptions& idx)
    : rows_(rows), cols_(cols), channels_(shape.channels), idx_(checked_idx_options(idx)) {
  if (rows < 1 || cols < 1 || shape.channels < 1 || shape.height < 1 || shape.width < 1)
    throw std::invalid_argument("IdxImageTransform: sizes must be >= 1; got " + std::to_string(rows) + " x " +
                                std::to_string(cols) + " -> " + std::to_string(shape.channels) + " x " +
                                std::to_string(shape.height) + " x " + std::to_string(shape.width));
  row_taps_ = bilinear_taps<Tap>(rows, shape.height);
  col_taps_ = bilinear_taps<Tap>(cols, shape.width);
}

void IdxImageTransform::apply(const IdxDataset& data, int64_t sample, float* out) const {
  if (sample < 0 || sample >= data.count)
    throw std::out_of_range("IdxImageTransform: sample " + std::to_string(sample) + " outside [0, " +
                            std::to_string(data.count) + ")");
  if (data.rows != rows_ || data.cols != cols_)
    throw std::invalid_argument("IdxImageTransform: data set images are " + std::to_string(data.rows) + " x " +
                                std::to_string(data.cols) + ", expected " + std::to_string(rows_) + " x " +
                                std::to_string(cols_));
  const size_t in_elems = static_cast<size_t>(rows_) * cols_;
  const size_t plane = row_taps_.size() * col_taps_.size();
  std::vector<float> in(in_elems);
  const uint8_t* px = data.pixels.data() + static_cast<size_t>(sample) * in_elems;
  for (size_t i = 0; i < in_elems; ++i) in[i] = px[i] / 255.0f;
  resize_with_taps(in.data(), cols_, out, row_taps_, col_taps_);
  const float inv_std = 1.0f / idx_.std;
  for (size_t i = 0; i < plane; ++i) out[i] = (out[i] - idx_.mean) * inv_std;
  for (int c = 1; c < channels_; ++c) std::copy(out, out + plane, out + c * plane);
}

// ---------------------------------------------------------------- factory

std::unique_ptr<HostSource> make_host_source(const DataSpec& spec, const BatchShape& shape, uint64_t seed, int rank,
                                             int world, std::vector<Batch> slots, const SourceOptions& options,
                                             const IdxOptions& idx) {
  switch (spec.kind) {
    case DataSpec::Kind::synthetic:
      checked_rank(rank, world, "SyntheticSource");
      return std::make_unique<SyntheticSource>(shape, seed, rank, std::move(slots), options);
    case DataSpec::Kind::idx: {
      auto data = std::make_shared<const IdxDataset>(read_idx_dataset(spec.dir, "train"));
      return std::make_unique<IdxSource>(std::move(data), shape, seed, rank, world, std::move(slots), options, idx);
    }
    case DataSpec::Kind::device:
      break;
  }
  throw std::invalid_argument("--data device: batches are generated on the GPU (DeviceSyntheticSource), not by a "
                              "host source");
}

}  // namespace vitddp
