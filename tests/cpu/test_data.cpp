// Data sources: --data parsing, the prefetch ring, synthetic batches, IDX files, resize, rank split.
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "model/synthetic_data.h"
#include "model/vit_config.h"
#include "src/data/data.h"
#include "tests/catch.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using namespace vitddp;
using vitddp_test::message_of;
using vitddp_test::TempDir;

namespace {

void put_be32(std::vector<unsigned char>& v, uint32_t x) {
  for (int s = 24; s >= 0; s -= 8) v.push_back(static_cast<unsigned char>(x >> s));
}

void write_bytes(const std::string& path, const std::vector<unsigned char>& bytes, bool gz) {
  if (gz) {
    gzFile f = gzopen(path.c_str(), "wb");
    REQUIRE(f != nullptr);
    REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size()));
    REQUIRE(gzclose(f) == Z_OK);
  } else {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    REQUIRE(f.good());
  }
}

std::vector<unsigned char> idx3(uint32_t magic, uint32_t n, uint32_t rows, uint32_t cols,
                                const std::vector<unsigned char>& pixels) {
  std::vector<unsigned char> v;
  put_be32(v, magic);
  put_be32(v, n);
  put_be32(v, rows);
  put_be32(v, cols);
  v.insert(v.end(), pixels.begin(), pixels.end());
  return v;
}

std::vector<unsigned char> idx1(uint32_t magic, uint32_t n, const std::vector<unsigned char>& labels) {
  std::vector<unsigned char> v;
  put_be32(v, magic);
  put_be32(v, n);
  v.insert(v.end(), labels.begin(), labels.end());
  return v;
}

// A data set of n images rows x cols: pixel i of sample k = (k * 7 + i * 13) % 256; label of
// sample k = k % classes. Written as DIR/<split>-{images-idx3,labels-idx1}-ubyte[.gz].
struct TinyIdx {
  int n, rows, cols, classes;
  std::vector<unsigned char> pixels, labels;
  TinyIdx(int n_, int rows_, int cols_, int classes_) : n(n_), rows(rows_), cols(cols_), classes(classes_) {
    for (int k = 0; k < n; ++k) {
      for (int i = 0; i < rows * cols; ++i) pixels.push_back(static_cast<unsigned char>((k * 7 + i * 13) % 256));
      labels.push_back(static_cast<unsigned char>(k % classes));
    }
  }
  void write(const std::string& dir, const std::string& split, bool gz) const {
    const std::string ext = gz ? ".gz" : "";
    write_bytes(dir + "/" + split + "-images-idx3-ubyte" + ext, idx3(0x803, n, rows, cols, pixels), gz);
    write_bytes(dir + "/" + split + "-labels-idx1-ubyte" + ext, idx1(0x801, n, labels), gz);
  }
};

BatchShape shape_of(int batch, int channels, int h, int w, int classes) {
  BatchShape s;
  s.batch = batch;
  s.channels = channels;
  s.height = h;
  s.width = w;
  s.num_classes = classes;
  return s;
}

// Waits (up to 10 s) until pred() holds.
template <class Pred>
bool eventually(Pred pred) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace

// ---------------------------------------------------------------- --data

TEST_CASE("--data parses synthetic, device and idx:DIR and names itself in errors", "[data]") {
  CHECK(parse_data_option("synthetic").kind == DataSpec::Kind::synthetic);
  CHECK(parse_data_option("device").kind == DataSpec::Kind::device);
  const DataSpec idx = parse_data_option("idx:/usr/share/datasets/fashion-mnist");
  CHECK(idx.kind == DataSpec::Kind::idx);
  CHECK(idx.dir == "/usr/share/datasets/fashion-mnist");
  for (const char* bad : {"", "idx:", "imagenet", "Synthetic", "idx", "device:0"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_data_option(bad), std::invalid_argument);
    CHECK(message_of([&] { parse_data_option(bad); }).rfind("--data", 0) == 0);
  }
  CHECK(message_of([] { parse_data_option("imagenet"); }).find("'imagenet'") != std::string::npos);
}

TEST_CASE("batch_shape follows the model and HostBatchBuffers sizes the slots", "[data]") {
  const BatchShape s = batch_shape(vit_config("vit_tiny"), 8);
  CHECK(s.batch == 8);
  CHECK(s.channels == 3);
  CHECK(s.height == 32);
  CHECK(s.width == 32);
  CHECK(s.images_elems() == size_t(8) * 3 * 32 * 32);
  CHECK(s.images_bytes() == s.images_elems() * 4);
  CHECK(s.labels_bytes() == 32);
  HostBatchBuffers buf(s, 3);
  const auto slots = buf.slots();
  REQUIRE(slots.size() == 3);
  CHECK(slots[0].images != slots[1].images);
  CHECK(slots[2].step == -1);
}

// ---------------------------------------------------------------- prefetch ring

TEST_CASE("PrefetchRing fills slots ahead, keeps the held batch intact, and refills only released slots", "[data]") {
  const int batch = 4;
  HostBatchBuffers buf(shape_of(batch, 1, 1, 1, 1), 3);
  std::mutex m;
  std::multiset<int64_t> produced;  // one entry per finished chunk
  std::atomic<int64_t> max_step{-1};
  auto produce = [&](int64_t step, int first, int count, const Batch& out) {
    for (int n = first; n < first + count; ++n) {
      out.labels[n] = static_cast<int32_t>(step);
      out.images[n] = static_cast<float>(step * 100 + n);
    }
    std::lock_guard<std::mutex> lock(m);
    produced.insert(step);
    max_step = std::max<int64_t>(max_step, step);
  };
  const int workers = 2;  // 2 chunks of 2 samples per batch
  PrefetchRing ring(buf.slots(), batch, workers, 0, produce);
  auto chunks_of = [&](int64_t s) {
    std::lock_guard<std::mutex> lock(m);
    return produced.count(s);
  };
  // Before any next(): 3 slots, so steps 0, 1, 2 are produced, and not step 3.
  REQUIRE(eventually([&] { return chunks_of(2) == 2; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(max_step == 2);

  Batch b0 = ring.next();
  CHECK(b0.step == 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(max_step == 2);  // slot of step 0 is held: step 3 must wait
  for (int n = 0; n < batch; ++n) {
    CHECK(b0.labels[n] == 0);
    CHECK(b0.images[n] == float(n));
  }
  Batch b1 = ring.next();  // releases step 0's slot
  CHECK(b1.step == 1);
  CHECK(b1.images[3] == 103.0f);
  REQUIRE(eventually([&] { return chunks_of(3) == 2; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(max_step == 3);
  CHECK(b1.labels[0] == 1);  // still held, untouched
  for (int64_t s = 2; s < 20; ++s) {
    Batch b = ring.next();
    CHECK(b.step == s);
    for (int n = 0; n < batch; ++n) CHECK(b.images[n] == float(s * 100 + n));
  }
}

TEST_CASE("PrefetchRing hands a producer's exception to next() and still shuts down", "[data]") {
  HostBatchBuffers buf(shape_of(2, 1, 1, 1, 1), 2);
  PrefetchRing ring(buf.slots(), 2, 3, 5, [](int64_t step, int, int, const Batch&) {
    if (step == 6) throw std::runtime_error("bad sample at step 6");
  });
  std::string msg;
  for (int i = 0; i < 3 && msg.empty(); ++i) msg = message_of([&] { ring.next(); }, "");  // "" while no exception: keep calling
  CHECK(msg == "bad sample at step 6");
  CHECK_THROWS_AS(PrefetchRing(buf.slots(), 2, 0, 0, [](int64_t, int, int, const Batch&) {}), std::invalid_argument);
  CHECK_THROWS_AS(PrefetchRing({buf.slots()[0]}, 2, 1, 0, [](int64_t, int, int, const Batch&) {}),
                  std::invalid_argument);
}

// ---------------------------------------------------------------- synthetic

TEST_CASE("SyntheticSource is deterministic in (seed, rank, step), independent of workers", "[data]") {
  const BatchShape shape = shape_of(5, 3, 7, 9, 10);  // odd image size: value pairs straddle samples
  HostBatchBuffers buf_a(shape, 3), buf_b(shape, 2), buf_c(shape, 3), buf_d(shape, 3);
  SyntheticSource a(shape, 42, 0, buf_a.slots(), SourceOptions{1, 0});
  SyntheticSource b(shape, 42, 0, buf_b.slots(), SourceOptions{4, 0});
  SyntheticSource other_rank(shape, 42, 1, buf_c.slots(), SourceOptions{3, 0});
  SyntheticSource resumed(shape, 42, 0, buf_d.slots(), SourceOptions{2, 3});
  for (int64_t step = 0; step < 6; ++step) {
    const Batch x = a.next(), y = b.next(), z = other_rank.next();
    REQUIRE(x.step == step);
    REQUIRE(y.step == step);
    CHECK(std::equal(x.images, x.images + shape.images_elems(), y.images));
    CHECK(std::equal(x.labels, x.labels + shape.batch, y.labels));
    CHECK_FALSE(std::equal(x.images, x.images + shape.images_elems(), z.images));  // ranks differ
    for (size_t i = 0; i < shape.images_elems(); i += 17) CHECK(x.images[i] == synthetic_pixel(42, 0, step, i));
    for (int n = 0; n < shape.batch; ++n) {
      CHECK(x.labels[n] == synthetic_label(42, 0, step, n, 10));
      CHECK(x.labels[n] >= 0);
      CHECK(x.labels[n] < 10);
    }
    if (step >= 3) {
      const Batch r = resumed.next();
      CHECK(r.step == step);
      CHECK(std::equal(x.images, x.images + shape.images_elems(), r.images));
    }
  }
  // Steps differ, seeds differ.
  std::vector<float> s0(shape.images_elems()), s1(shape.images_elems()), k1(shape.images_elems());
  std::vector<int32_t> l(shape.batch);
  a.produce(100, 0, shape.batch, Batch{s0.data(), l.data(), 100});
  a.produce(101, 0, shape.batch, Batch{s1.data(), l.data(), 101});
  CHECK(s0 != s1);
  HostBatchBuffers buf_e(shape, 2);
  SyntheticSource other_seed(shape, 43, 0, buf_e.slots());
  other_seed.produce(100, 0, shape.batch, Batch{k1.data(), l.data(), 100});
  CHECK(s0 != k1);
  CHECK_THROWS_AS(SyntheticSource(shape, 1, -1, buf_e.slots()), std::invalid_argument);
  CHECK_THROWS_AS(SyntheticSource(shape_of(0, 3, 4, 4, 10), 1, 0, buf_e.slots()), std::invalid_argument);
}

TEST_CASE("SyntheticSource images are standard normal and labels uniform", "[data]") {
  const BatchShape shape = shape_of(16, 3, 32, 32, 10);
  HostBatchBuffers buf(shape, 3);
  SyntheticSource src(shape, 7, 3, buf.slots());
  double sum = 0, sum2 = 0, within1 = 0, n = 0;
  std::vector<double> counts(10, 0);
  double labels = 0;
  for (int step = 0; step < 8; ++step) {
    const Batch b = src.next();
    for (size_t i = 0; i < shape.images_elems(); ++i) {
      const double x = b.images[i];
      sum += x;
      sum2 += x * x;
      within1 += std::abs(x) < 1.0;
      ++n;
    }
  }
  // Labels: many small batches' worth, straight from produce().
  std::vector<float> img(shape.images_elems());
  std::vector<int32_t> lab(shape.batch);
  for (int step = 0; step < 1000; ++step) {
    for (int k = 0; k < shape.batch; ++k) {
      const int32_t y = synthetic_label(7, 3, step, k, 10);
      REQUIRE(y >= 0);
      REQUIRE(y < 10);
      counts[y] += 1;
      labels += 1;
    }
  }
  const double mean = sum / n;
  const double sd = std::sqrt(sum2 / n - mean * mean);
  // 5-sigma bounds from the sample size: se(mean) = 1/sqrt(n), se(sd) ~ 1/sqrt(2n).
  CHECK(std::abs(mean) < 5.0 / std::sqrt(n));
  CHECK(std::abs(sd - 1.0) < 5.0 / std::sqrt(2 * n));
  const double p1 = 0.6826894921370859;  // P(|z| < 1)
  CHECK(std::abs(within1 / n - p1) < 5.0 * std::sqrt(p1 * (1 - p1) / n));
  for (int c = 0; c < 10; ++c) {
    INFO("class " << c << " count " << counts[c]);
    CHECK(std::abs(counts[c] - labels / 10) < 5.0 * std::sqrt(labels * 0.1 * 0.9));
  }
}

// ---------------------------------------------------------------- resize

TEST_CASE("resize_bilinear matches torch interpolate(bilinear, align_corners=False)", "[data]") {
  // torch.nn.functional.interpolate(torch.tensor([[[[1., 2.], [3., 4.]]]]), size=(4, 4),
  //                                 mode="bilinear", align_corners=False)
  const float in[4] = {1, 2, 3, 4};
  const float expect[16] = {1.00f, 1.25f, 1.75f, 2.00f,  //
                            1.50f, 1.75f, 2.25f, 2.50f,  //
                            2.50f, 2.75f, 3.25f, 3.50f,  //
                            3.00f, 3.25f, 3.75f, 4.00f};
  float out[16];
  resize_bilinear(in, 2, 2, out, 4, 4);
  for (int i = 0; i < 16; ++i) CHECK(out[i] == Approx(expect[i]).margin(1e-6));

  // 4x4 -> 2x2: each output is the mean of a 2x2 block (source coordinates 0.5 and 2.5).
  const float big[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  float small[4];
  resize_bilinear(big, 4, 4, small, 2, 2);
  CHECK(small[0] == Approx(2.5f));
  CHECK(small[1] == Approx(4.5f));
  CHECK(small[2] == Approx(10.5f));
  CHECK(small[3] == Approx(12.5f));

  // 2x3 -> 3x2 (non-square): rows src = {0, 0.5->clamped.., } computed by hand.
  // rows: scale 2/3, dst 0 -> -0.1667 -> 0; dst 1 -> 0.5; dst 2 -> 1.1667 -> (1,1).
  // cols: scale 3/2, dst 0 -> 0.25; dst 1 -> 1.75.
  const float r[6] = {0, 10, 20, 30, 40, 50};
  float o[6];
  resize_bilinear(r, 2, 3, o, 3, 2);
  CHECK(o[0] == Approx(2.5f));   // row 0: 0.75*0 + 0.25*10
  CHECK(o[1] == Approx(17.5f));  // row 0: 0.25*10 + 0.75*20
  CHECK(o[2] == Approx(17.5f));  // row 0.5: mean of 2.5 and 32.5
  CHECK(o[3] == Approx(32.5f));
  CHECK(o[4] == Approx(32.5f));  // row 1
  CHECK(o[5] == Approx(47.5f));

  // Same size: identity, exactly.
  std::vector<float> img(28 * 28), same(28 * 28);
  for (size_t i = 0; i < img.size(); ++i) img[i] = static_cast<float>((i * 37) % 256) / 255.0f;
  resize_bilinear(img.data(), 28, 28, same.data(), 28, 28);
  CHECK(img == same);
}

// ---------------------------------------------------------------- IDX

TEST_CASE("IDX files read the same plain and gzip'd, and IdxSource resizes, normalizes and repeats channels",
          "[data]") {
  TempDir plain("vitddp_data_"), gz("vitddp_data_");
  const TinyIdx tiny(12, 2, 2, 12);
  tiny.write(plain.str(), "train", false);
  tiny.write(gz.str(), "train", true);
  const IdxDataset a = read_idx_dataset(plain.str(), "train");
  const IdxDataset b = read_idx_dataset(gz.str(), "train");
  CHECK(a.count == 12);
  CHECK(a.rows == 2);
  CHECK(a.cols == 2);
  CHECK(a.pixels == std::vector<uint8_t>(tiny.pixels.begin(), tiny.pixels.end()));
  CHECK(a.labels == std::vector<uint8_t>(tiny.labels.begin(), tiny.labels.end()));
  CHECK(b.pixels == a.pixels);
  CHECK(b.labels == a.labels);

  const BatchShape shape = shape_of(3, 3, 4, 4, 12);
  HostBatchBuffers buf(shape, 3);
  IdxOptions norm;
  norm.mean = 0.5f;
  norm.std = 0.25f;
  IdxSource src(std::make_shared<const IdxDataset>(b), shape, 9, 1, 2, buf.slots(), SourceOptions{2, 0}, norm);
  CHECK(src.batches_per_epoch() == 2);  // 12 / 2 ranks = 6 per rank, batches of 3
  for (int step = 0; step < 3; ++step) {
    const Batch batch = src.next();
    for (int n = 0; n < shape.batch; ++n) {
      const int64_t k = src.sample_index(step, n);
      CHECK(batch.labels[n] == tiny.labels[k]);
      // The 2x2 -> 4x4 weights of the resize test, on pixels p/255, then (x - 0.5) / 0.25.
      const unsigned char* p = &tiny.pixels[k * 4];
      const float w[4][2] = {{1, 0}, {0.75f, 0.25f}, {0.25f, 0.75f}, {0, 1}};
      for (int c = 0; c < 3; ++c)
        for (int y = 0; y < 4; ++y)
          for (int x = 0; x < 4; ++x) {
            const float v = (w[y][0] * (w[x][0] * p[0] + w[x][1] * p[1]) + w[y][1] * (w[x][0] * p[2] + w[x][1] * p[3])) /
                            255.0f;
            CHECK(batch.images[((n * 3 + c) * 4 + y) * 4 + x] == Approx((v - 0.5f) / 0.25f).margin(1e-5));
          }
    }
  }
}

TEST_CASE("IdxSource at the data set's own size copies pixels exactly (28 -> 28 identity)", "[data]") {
  TempDir dir("vitddp_data_");
  const TinyIdx tiny(4, 28, 28, 10);
  tiny.write(dir.str(), "t10k", true);
  auto data = std::make_shared<const IdxDataset>(read_idx_dataset(dir.str(), "t10k"));
  const BatchShape shape = shape_of(2, 1, 28, 28, 10);
  HostBatchBuffers buf(shape, 2);
  IdxOptions unit;
  unit.mean = 0;
  unit.std = 1;
  IdxSource src(data, shape, 1, 0, 1, buf.slots(), SourceOptions{1, 0}, unit);
  const Batch b = src.next();
  for (int n = 0; n < 2; ++n) {
    const int64_t k = src.sample_index(0, n);
    for (int i = 0; i < 28 * 28; ++i) CHECK(b.images[n * 784 + i] == tiny.pixels[k * 784 + i] / 255.0f);
  }
}

TEST_CASE("IdxSource splits each epoch over ranks without overlap, same permutation on every rank", "[data]") {
  TempDir dir("vitddp_data_");
  const int n = 12;
  const TinyIdx tiny(n, 2, 2, n);  // label == sample index
  tiny.write(dir.str(), "train", false);
  auto data = std::make_shared<const IdxDataset>(read_idx_dataset(dir.str(), "train"));
  const BatchShape shape = shape_of(3, 1, 2, 2, n);
  HostBatchBuffers b0(shape, 3), b1(shape, 3);
  IdxSource r0(data, shape, 5, 0, 2, b0.slots(), SourceOptions{3, 0});
  IdxSource r1(data, shape, 5, 1, 2, b1.slots(), SourceOptions{1, 0});
  REQUIRE(r0.batches_per_epoch() == 2);
  REQUIRE(r1.batches_per_epoch() == 2);
  std::vector<std::vector<int>> epochs;
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::vector<int> seen;
    for (int b = 0; b < 2; ++b) {
      const Batch x = r0.next(), y = r1.next();
      REQUIRE(x.step == epoch * 2 + b);
      for (int k = 0; k < 3; ++k) {
        seen.push_back(x.labels[k]);
        seen.push_back(y.labels[k]);
      }
    }
    std::vector<int> sorted = seen;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int> all(n);
    for (int i = 0; i < n; ++i) all[i] = i;
    CHECK(sorted == all);  // every sample exactly once per epoch over the two ranks
    epochs.push_back(seen);
  }
  CHECK(epochs[0] != epochs[1]);  // reshuffled per epoch
  // The interleaving is DistributedSampler's: rank r takes permutation entries r, r + 2, ...
  const auto perm = IdxSource::epoch_permutation(5, 1, n);
  for (int b = 0; b < 2; ++b)
    for (int k = 0; k < 3; ++k) {
      CHECK(r0.sample_index(2 + b, k) == perm[(b * 3 + k) * 2 + 0]);
      CHECK(r1.sample_index(2 + b, k) == perm[(b * 3 + k) * 2 + 1]);
    }
  CHECK(IdxSource::epoch_permutation(5, 1, n) == perm);  // deterministic
  CHECK(IdxSource::epoch_permutation(6, 1, n) != perm);  // seed matters

  // drop_last: 13 samples on 2 ranks -> 6 each, batches of 4 -> 1 batch per epoch, no overlap.
  TempDir odd("vitddp_data_");
  TinyIdx(13, 2, 2, 13).write(odd.str(), "train", false);
  auto data13 = std::make_shared<const IdxDataset>(read_idx_dataset(odd.str(), "train"));
  const BatchShape s4 = shape_of(4, 1, 2, 2, 13);
  HostBatchBuffers c0(s4, 2), c1(s4, 2);
  IdxSource q0(data13, s4, 5, 0, 2, c0.slots());
  IdxSource q1(data13, s4, 5, 1, 2, c1.slots());
  CHECK(q0.batches_per_epoch() == 1);
  const Batch x = q0.next(), y = q1.next();
  std::set<int> both(x.labels, x.labels + 4);
  both.insert(y.labels, y.labels + 4);
  CHECK(both.size() == 8);
  // Too few samples for one batch per rank, or labels beyond the model's classes.
  HostBatchBuffers c2(shape_of(7, 1, 2, 2, 13), 2);
  CHECK_THROWS_AS(IdxSource(data13, shape_of(7, 1, 2, 2, 13), 5, 0, 2, c2.slots()), std::invalid_argument);
  CHECK(message_of([&] { IdxSource(data13, shape_of(4, 1, 2, 2, 10), 5, 0, 2, c1.slots()); }).find("label 12") !=
        std::string::npos);
  CHECK_THROWS_AS(IdxSource(data13, s4, 5, 2, 2, c1.slots()), std::invalid_argument);
}

TEST_CASE("IDX reader errors name the file and the problem", "[data]") {
  TempDir dir("vitddp_data_");
  const std::string d = dir.str();
  const TinyIdx tiny(3, 2, 2, 10);

  // Missing directory / missing file.
  const std::string missing_dir = d + "/nowhere";
  std::string msg = message_of([&] { read_idx_dataset(missing_dir, "train"); });
  CHECK(msg.find(missing_dir) != std::string::npos);
  CHECK(msg.find("does not exist") != std::string::npos);
  msg = message_of([&] { read_idx_dataset(d, "train"); });
  CHECK(msg.find(d + "/train-images-idx3-ubyte") != std::string::npos);
  CHECK(msg.find(".gz") != std::string::npos);

  // Bad magic in the images file.
  write_bytes(d + "/train-images-idx3-ubyte", idx3(0x804, 3, 2, 2, tiny.pixels), false);
  write_bytes(d + "/train-labels-idx1-ubyte", idx1(0x801, 3, tiny.labels), false);
  msg = message_of([&] { read_idx_dataset(d, "train"); });
  CHECK(msg.find(d + "/train-images-idx3-ubyte") != std::string::npos);
  CHECK(msg.find("magic") != std::string::npos);
  CHECK(msg.find("0x00000804") != std::string::npos);

  // Bad magic in the labels file (images swapped for labels).
  write_bytes(d + "/train-images-idx3-ubyte", idx3(0x803, 3, 2, 2, tiny.pixels), false);
  write_bytes(d + "/train-labels-idx1-ubyte", idx3(0x803, 3, 2, 2, tiny.pixels), false);
  msg = message_of([&] { read_idx_dataset(d, "train"); });
  CHECK(msg.find("train-labels-idx1-ubyte") != std::string::npos);
  CHECK(msg.find("magic") != std::string::npos);

  // Count mismatch.
  write_bytes(d + "/train-labels-idx1-ubyte", idx1(0x801, 2, {0, 1}), false);
  msg = message_of([&] { read_idx_dataset(d, "train"); });
  CHECK(msg.find("2 labels") != std::string::npos);
  CHECK(msg.find("3 images") != std::string::npos);

  // Truncated pixel data (plain) and truncated gzip stream.
  std::vector<unsigned char> pixels_short(tiny.pixels.begin(), tiny.pixels.end() - 3);
  write_bytes(d + "/train-images-idx3-ubyte", idx3(0x803, 3, 2, 2, pixels_short), false);
  write_bytes(d + "/train-labels-idx1-ubyte", idx1(0x801, 3, tiny.labels), false);
  msg = message_of([&] { read_idx_dataset(d, "train"); });
  CHECK(msg.find(d + "/train-images-idx3-ubyte") != std::string::npos);
  CHECK(msg.find("truncated: expected 12 bytes of pixels, got 9") != std::string::npos);
  // A header that claims 4 GiB of pixels in a file of 8 bytes fails on the missing bytes, having
  // allocated one 64 MiB piece rather than the 4 GiB it claims (the exact counts in the message).
  write_bytes(d + "/train-images-idx3-ubyte", idx3(0x803, 65536, 256, 256, std::vector<unsigned char>(8)), false);
  msg = message_of([&] { read_idx_dataset(d, "train"); });
  CHECK(msg.find("truncated: expected 4294967296 bytes of pixels, got 8") != std::string::npos);

  TempDir gzdir("vitddp_data_");
  std::vector<unsigned char> big_pixels(5000 * 4);
  for (size_t i = 0; i < big_pixels.size(); ++i) big_pixels[i] = static_cast<unsigned char>(i * 2654435761u >> 13);
  const std::string gz_path = gzdir.str() + "/t10k-images-idx3-ubyte.gz";
  write_bytes(gz_path, idx3(0x803, 5000, 2, 2, big_pixels), true);
  write_bytes(gzdir.str() + "/t10k-labels-idx1-ubyte.gz", idx1(0x801, 5000, std::vector<unsigned char>(5000, 1)), true);
  CHECK(read_idx_dataset(gzdir.str(), "t10k").count == 5000);
  const auto full = fs::file_size(gz_path);
  fs::resize_file(gz_path, full / 2);
  msg = message_of([&] { read_idx_dataset(gzdir.str(), "t10k"); });
  CHECK(msg.find(gz_path) != std::string::npos);
  CHECK((msg.find("truncated") != std::string::npos || msg.find("unexpected end") != std::string::npos));

  // Trailing bytes, header cut short, zero sizes.
  write_bytes(d + "/train-images-idx3-ubyte", idx3(0x803, 2, 2, 2, tiny.pixels), false);  // 12 px for 8
  write_bytes(d + "/train-labels-idx1-ubyte", idx1(0x801, 2, {0, 1}), false);
  CHECK(message_of([&] { read_idx_dataset(d, "train"); }).find("trailing") != std::string::npos);
  write_bytes(d + "/train-images-idx3-ubyte", {0, 0, 8, 3, 0}, false);
  CHECK(message_of([&] { read_idx_dataset(d, "train"); }).find("truncated") != std::string::npos);
  write_bytes(d + "/train-images-idx3-ubyte", idx3(0x803, 0, 2, 2, {}), false);
  CHECK(message_of([&] { read_idx_dataset(d, "train"); }).find("implausible") != std::string::npos);
  CHECK_THROWS_AS(read_idx_dataset(d, "validation"), std::invalid_argument);
}

TEST_CASE("Fashion-MNIST from /usr/share/datasets loads 60000 + 10000 samples of 10 classes", "[data][fashion]") {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  const IdxDataset train = read_idx_dataset(dir, "train");
  const IdxDataset test = read_idx_dataset(dir, "t10k");
  CHECK(train.count == 60000);
  CHECK(test.count == 10000);
  CHECK(train.rows == 28);
  CHECK(train.cols == 28);
  for (const IdxDataset* d : {&train, &test}) {
    std::vector<int64_t> per_class(10, 0);
    for (uint8_t y : d->labels) {
      REQUIRE(y < 10);
      ++per_class[y];
    }
    for (int c = 0; c < 10; ++c) CHECK(per_class[c] == d->count / 10);  // balanced: 6000 / 1000 each
  }
  // The documented normalisation is the train set's: mean 0.2860, std 0.3530.
  double sum = 0, sum2 = 0;
  for (uint8_t p : train.pixels) {
    sum += p / 255.0;
    sum2 += (p / 255.0) * (p / 255.0);
  }
  const double mean = sum / train.pixels.size();
  CHECK(mean == Approx(0.2860).margin(5e-4));
  CHECK(std::sqrt(sum2 / train.pixels.size() - mean * mean) == Approx(0.3530).margin(5e-4));

  // A vit_tiny batch through make_host_source: 32x32x3, normalised range.
  const BatchShape shape = batch_shape(vit_config("vit_tiny", 10), 8);
  HostBatchBuffers buf(shape, kDefaultRingSlots);
  auto src = make_host_source(parse_data_option("idx:" + dir), shape, 1, 1, 4, buf.slots());
  CHECK(src->batches_per_epoch() == 60000 / 4 / 8);
  const Batch b = src->next();
  const auto [lo, hi] = std::minmax_element(b.images, b.images + shape.images_elems());
  CHECK(*lo >= (0 - 0.2860f) / 0.3530f - 1e-5f);
  CHECK(*hi <= (1 - 0.2860f) / 0.3530f + 1e-5f);
  CHECK(*hi > *lo);
  for (int n = 0; n < 8; ++n) CHECK(b.labels[n] < 10);
  CHECK_THROWS_AS(make_host_source(parse_data_option("device"), shape, 1, 0, 1, buf.slots()), std::invalid_argument);
}

TEST_CASE("label_problem names the first label that does not fit, its sample and the file", "[data]") {
  IdxDataset d;
  d.count = 4;
  d.labels = {0, 4, 9, 12};
  d.labels_path = "/data/train-labels-idx1-ubyte";
  CHECK(label_problem(d, 13).empty());
  CHECK(label_problem(d, 5) ==
        "label 9 of sample 2 in '/data/train-labels-idx1-ubyte' does not fit the model's 5 classes (set --num-classes)");
}
