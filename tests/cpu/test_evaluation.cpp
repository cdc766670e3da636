// The evaluation pass (src/app/evaluation.h): sharding covers every sample once, the CPU engine's
// evaluate() equals cross-entropy and argmax computed here from CpuViT's logits in double, the
// Evaluator over simulated ranks equals one rank over the whole split, and --eval-* options.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "model/cpu_vit.h"
#include "model/param_layout.h"
#include "model/vit_config.h"
#include "src/data/data.h"
#include "src/engines/engine.h"
#include "src/app/evaluation.h"
#include "tests/catch.h"
#include "tests/test_util.h"

using namespace vitddp;
using vitddp_test::message_of;
using vitddp_test::option_error;
using vitddp_test::random_images;
using vitddp_test::random_labels;

namespace {

/// Cross-entropy sum and correct count of `batch` rows of logits, written out plainly here (the
/// reference for logits_metrics and Engine::evaluate): log(sum_k exp z_k) - z_label with the
/// maximum subtracted, argmax as the first index of the maximum.
EvalResult direct_metrics(const std::vector<double>& z, const std::vector<int32_t>& labels, int batch, int classes) {
  EvalResult r;
  for (int b = 0; b < batch; ++b) {
    const double* row = z.data() + (size_t)b * classes;
    const double m = *std::max_element(row, row + classes);
    double s = 0;
    for (int k = 0; k < classes; ++k) s += std::exp(row[k] - m);
    r.loss_sum += m + std::log(s) - row[labels[b]];
    const int arg = (int)(std::max_element(row, row + classes) - row);
    r.correct += arg == labels[b];
  }
  r.count = batch;
  return r;
}

/// An in-memory IDX data set of n images rows x cols: pixel i of sample k = (k * 7 + i * 13) % 256
/// (k * 31 % 256 for the first pixel, so samples differ), label k % classes.
std::shared_ptr<const IdxDataset> tiny_dataset(int n, int rows, int cols, int classes) {
  auto d = std::make_shared<IdxDataset>();
  d->count = n;
  d->rows = rows;
  d->cols = cols;
  for (int k = 0; k < n; ++k) {
    for (int i = 0; i < rows * cols; ++i)
      d->pixels.push_back((uint8_t)(i == 0 ? (k * 31) % 256 : (k * 7 + i * 13) % 256));
    d->labels.push_back((uint8_t)(k % classes));
  }
  return d;
}

Options cpu_options(const std::string& model, int batch) {
  Options o;
  o.model = model;
  o.batch_size = batch;
  o.backend = Backend::Cpu;
  o.ddp = false;
  o.init = InitScheme::Random;
  return o;
}

}  // namespace

TEST_CASE("eval_shard and eval_batches cover every sample exactly once, any n, world and batch", "[eval]") {
  for (int64_t n : {0, 1, 2, 7, 31, 32, 33, 100, 1000, 1001, 10000, 9973}) {
    for (int world : {1, 2, 3, 4, 7, 8}) {
      for (int batch : {1, 3, 8, 32, 128}) {
        std::vector<int> seen((size_t)n, 0);
        int64_t next = 0;  // shards are adjacent, in rank order
        for (int r = 0; r < world; ++r) {
          const EvalShard s = eval_shard(n, r, world);
          REQUIRE(s.begin == next);
          REQUIRE(s.end >= s.begin);
          CHECK(std::abs(s.size() - n / world) <= 1);  // balanced
          next = s.end;
          const auto batches = eval_batches(s, batch);
          CHECK((int64_t)batches.size() == (s.size() + batch - 1) / batch);
          for (size_t j = 0; j < batches.size(); ++j) {
            const EvalShard& b = batches[j];
            REQUIRE(b.size() >= 1);
            REQUIRE(b.size() <= batch);
            if (j + 1 < batches.size()) CHECK(b.size() == batch);  // only the last is partial
            for (int64_t i = b.begin; i < b.end; ++i) ++seen[(size_t)i];
          }
        }
        CHECK(next == n);
        CHECK(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
      }
    }
  }
  CHECK_THROWS_AS(eval_shard(10, 2, 2), std::invalid_argument);
  CHECK_THROWS_AS(eval_shard(-1, 0, 1), std::invalid_argument);
  CHECK_THROWS_AS(eval_batches(EvalShard{0, 4}, 0), std::invalid_argument);
}

TEST_CASE("eval_due: every N steps and after the last step; never when off", "[eval]") {
  std::vector<int> due;
  for (int s = 1; s <= 10; ++s)
    if (eval_due(4, s, 10)) due.push_back(s);
  CHECK(due == std::vector<int>{4, 8, 10});
  CHECK(eval_due(5, 10, 10));
  CHECK_FALSE(eval_due(0, 10, 10));
  CHECK(eval_due(100, 3, 3));  // a run shorter than N still evaluates at its end
}

TEST_CASE("logits_metrics: cross-entropy sum and top-1 as written out, ties to the first index", "[eval]") {
  const std::vector<double> z = {1.0, 2.0, 0.5,    // argmax 1
                                 3.0, 3.0, -1.0,   // tie: argmax 0
                                 -2.0, 0.0, 10.0}; // argmax 2
  const std::vector<int32_t> labels = {1, 1, 0};
  const EvalResult r = logits_metrics(z.data(), labels.data(), 3, 3);
  const EvalResult d = direct_metrics(z, labels, 3, 3);
  CHECK(r.count == 3);
  CHECK(r.correct == 1);  // row 0 only: row 1's tie goes to class 0
  CHECK(d.correct == 1);
  CHECK(r.loss_sum == Approx(d.loss_sum).epsilon(1e-14));
  const double row0 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(0.5)) - 2.0;
  const double row1 = std::log(2 * std::exp(3.0) + std::exp(-1.0)) - 3.0;
  const double row2 = std::log(std::exp(-2.0) + std::exp(0.0) + std::exp(10.0)) + 2.0;
  CHECK(r.loss_sum == Approx(row0 + row1 + row2).epsilon(1e-14));
  CHECK(r.accuracy() == Approx(1.0 / 3));
  CHECK(r.mean_loss() == Approx(r.loss_sum / 3));
  const std::vector<int32_t> bad = {0, 3, 0};
  CHECK(message_of([&] { logits_metrics(z.data(), bad.data(), 3, 3); }).find("label 3") != std::string::npos);
}

TEST_CASE("CPU engine evaluate() equals cross-entropy and argmax of CpuViT's logits in double", "[eval]") {
  const std::string model = GENERATE(std::string("vit_micro"), std::string("vit_tiny"));
  const int batch = 6;
  const Options o = cpu_options(model, batch);
  const ParamLayout L = make_param_layout(vit_config(model));
  const World w;
  auto engine = make_cpu_engine(o, w, L, {});
  const std::vector<float> before = engine->parameters();
  const auto images = random_images(L.cfg, batch, 11);
  const auto labels = random_labels(L.cfg, batch, 12);

  // Reference: the double-storage model on the same (float) parameters.
  std::vector<double> params_d(before.begin(), before.end());
  CpuViT<double> ref(L, batch);
  for (int n : {batch, 3, 1}) {  // full and partial batches
    const EvalResult got = engine->evaluate(HostBatch{images.data(), labels.data(), n});
    ref.forward(params_d.data(), images.data(), labels.data(), n);
    const EvalResult want = direct_metrics(ref.logits(), labels, n, L.cfg.num_classes);
    CHECK(got.count == n);
    CHECK(got.correct == want.correct);
    CHECK(got.loss_sum == Approx(want.loss_sum).epsilon(1e-5));
    // The same as the training loss (mean cross-entropy) of CpuViT<float> times n.
    CpuViT<float> fmodel(L, batch);
    CHECK(got.loss_sum == Approx(n * fmodel.forward(before.data(), images.data(), labels.data(), n)).epsilon(1e-9));
  }
  CHECK(engine->parameters() == before);  // forward only: nothing changes
  CHECK_THROWS_AS(engine->evaluate(HostBatch{images.data(), labels.data(), batch + 1}), std::invalid_argument);
  CHECK_THROWS_AS(engine->evaluate(HostBatch{images.data(), labels.data(), 0}), std::invalid_argument);
}

TEST_CASE("evaluate() between steps leaves training unchanged (staged batch, parameters)", "[eval]") {
  const int batch = 4;
  Options o = cpu_options("vit_micro", batch);
  o.lr = 0.1;
  o.momentum = 0.9;
  const ParamLayout L = make_param_layout(vit_config(o.model));
  const World w;
  const auto img_a = random_images(L.cfg, batch, 1), img_b = random_images(L.cfg, batch, 2);
  const auto lab_a = random_labels(L.cfg, batch, 3), lab_b = random_labels(L.cfg, batch, 4);
  auto train = [&](bool with_eval) {
    auto e = make_cpu_engine(o, w, L, {});
    StepRecord rec;
    e->stage(HostBatch{img_a.data(), lab_a.data(), batch});
    e->run_micro_step(0, 1);
    e->stage(HostBatch{img_b.data(), lab_b.data(), batch});  // staged before the evaluation, as the trainer does
    e->finish_step(&rec);
    if (with_eval) e->evaluate(HostBatch{img_a.data(), lab_b.data(), 3});
    e->run_micro_step(0, 1);
    e->finish_step(&rec);
    return e->parameters();
  };
  CHECK(train(true) == train(false));
}

TEST_CASE("IdxImageTransform gives exactly IdxSource's training images", "[eval]") {
  const auto data = tiny_dataset(12, 28, 28, 10);
  const BatchShape shape = batch_shape(vit_config("vit_tiny"), 4);  // 28 -> 32 resize, 3 channels
  HostBatchBuffers buf(shape, 2);
  IdxSource src(data, shape, 5, 0, 1, buf.slots(), SourceOptions{1, 0});
  const IdxImageTransform t(28, 28, shape);
  const Batch b = src.next();
  std::vector<float> img(shape.image_elems());
  for (int n = 0; n < 4; ++n) {
    t.apply(*data, src.sample_index(0, n), img.data());
    CHECK(std::equal(img.begin(), img.end(), b.images + n * shape.image_elems()));
  }
  CHECK_THROWS_AS(t.apply(*data, 12, img.data()), std::out_of_range);
}

TEST_CASE("Evaluator over 3 simulated ranks sums to one rank over the whole split", "[eval]") {
  const int batch = 4, n = 23;  // 23 = 8 + 8 + 7: partial batches on every rank
  const Options o = cpu_options("vit_fmnist_cpu", batch);
  const ParamLayout L = make_param_layout(vit_config(o.model));
  const auto data = tiny_dataset(n, 28, 28, 10);
  auto engine = make_cpu_engine(o, World{}, L, {});

  Evaluator whole(data, L.cfg, batch, World{}, *engine, nullptr);
  const EvalResult all = whole.run(1);
  CHECK(all.count == n);

  EvalResult sum;
  for (int r = 0; r < 3; ++r) {
    World w;
    w.rank = r;
    w.world_size = 3;
    Evaluator part(data, L.cfg, batch, w, *engine, nullptr);  // no MPI: run() returns the rank's own part
    const EvalResult e = part.run(1);
    CHECK(e.count == part.shard().size());
    sum.loss_sum += e.loss_sum;
    sum.correct += e.correct;
    sum.count += e.count;
  }
  CHECK(sum.count == n);
  CHECK(sum.correct == all.correct);
  CHECK(sum.loss_sum == Approx(all.loss_sum).epsilon(1e-12));

  // The reference: the whole split as one batch of the float model, preprocessed by hand.
  const BatchShape shape = batch_shape(L.cfg, n);
  std::vector<float> images(shape.images_elems());
  std::vector<int32_t> labels(n);
  const IdxImageTransform t(28, 28, shape);
  for (int k = 0; k < n; ++k) {
    t.apply(*data, k, images.data() + k * shape.image_elems());
    labels[k] = data->labels[k];
  }
  CpuViT<float> ref(L, n);
  const std::vector<float> p = engine->parameters();
  ref.forward(p.data(), images.data(), labels.data(), n);
  const EvalResult want = direct_metrics(ref.logits(), labels, n, L.cfg.num_classes);
  CHECK(all.correct == want.correct);
  CHECK(all.loss_sum == Approx(want.loss_sum).epsilon(1e-9));
}

TEST_CASE("--eval-every and --eval-split: parsing and the idx-only rule", "[eval][options]") {
  CHECK(vitddp_test::parse_args({}).eval_every == 0);
  CHECK(vitddp_test::parse_args({}).eval_split == EvalSplit::Test);
  const Options o = vitddp_test::parse_args({"--data", "idx:/x", "--eval-every", "50", "--eval-split", "train"});
  CHECK(o.eval_every == 50);
  CHECK(o.eval_split == EvalSplit::Train);
  CHECK(option_error({"--eval-every", "-1"}).find("--eval-every: must be in [0") == 0);
  CHECK(option_error({"--eval-split", "val"}).find("--eval-split: unknown value 'val'") == 0);
  for (const char* data : {"synthetic", "device"}) {
    const std::string e = option_error({"--data", data, "--eval-every", "10"});
    CHECK(e.find("--eval-every: --data " + std::string(data)) == 0);
    CHECK(e.find("--eval-split test") != std::string::npos);
    CHECK(e.find("idx:DIR") != std::string::npos);
  }
  CHECK(option_error({"--eval-every", "10"}).find("--eval-every:") == 0);  // default --data synthetic
  CHECK(option_error({"--data", "synthetic", "--eval-split", "train"}) ==
        "--eval-split: has no effect without --eval-every N (N > 0)");  // the no-effect rule
}

TEST_CASE("load_eval_data reads the t10k split, or reuses the training split", "[eval]") {
  vitddp_test::TempDir none("vitddp_eval_");
  Options o;
  o.data = DataSpec{DataSpec::Kind::idx, none.str()};
  CHECK(load_eval_data(o, nullptr, 10) == nullptr);  // --eval-every 0
  o.eval_every = 5;
  const std::string msg = message_of([&] { load_eval_data(o, nullptr, 10); });
  CHECK(msg.find("--eval-split test: ") == 0);
  CHECK(msg.find("t10k-images-idx3-ubyte") != std::string::npos);
  const auto train = tiny_dataset(5, 28, 28, 10);
  o.eval_split = EvalSplit::Train;
  CHECK(load_eval_data(o, train, 10) == train);
  CHECK(message_of([&] { load_eval_data(o, train, 3); }).find("--eval-split train: label") == 0);
  o.data = DataSpec{};
  CHECK_THROWS_AS(load_eval_data(o, nullptr, 10), std::invalid_argument);
}
