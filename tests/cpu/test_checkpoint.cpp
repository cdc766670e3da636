// Checkpoint files (src/io/checkpoint.h): round trip, crash safety of the publish step, the checks
// of a resume, and that an engine restored from a checkpoint continues bit for bit on the same
// batches as the data sources give after a resume (src/data/data.h first_step).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/param_layout.h"
#include "model/vit_config.h"
#include "src/io/checkpoint.h"
#include "src/io/checkpointer.h"
#include "src/data/data.h"
#include "src/engines/engine.h"
#include "src/engines/optimizer.h"
#include "src/io/weights_io.h"
#include "tests/catch.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using namespace vitddp;
using vitddp_test::message_of;
using vitddp_test::parse_args;
using vitddp_test::TempDir;

namespace {

/// A header as a 2-rank run with options `o` would write after `step` steps.
CheckpointHeader header_for(const Options& o, int64_t step) {
  CheckpointHeader h;
  h.model = o.model;
  h.step = step;
  h.world_size = 2;
  h.lr_decay_steps = lr_decay_steps(o);
  h.batches_consumed = {step * o.grad_accum_steps, step * o.grad_accum_steps};
  h.options = option_values(o);
  h.git_commit = "test";
  return h;
}

/// A TrainState of `layout` with distinct values in every buffer.
TrainState some_state(const ParamLayout& L, const std::vector<std::string>& names, int64_t steps) {
  TrainState s;
  s.params = vitddp_test::random_params(L, 1);
  for (size_t b = 0; b < names.size(); ++b) s.optimizer.emplace_back(names[b], vitddp_test::random_params(L, 2 + b));
  s.optimizer_steps = steps;
  return s;
}

}  // namespace

TEST_CASE("checkpoint: round trip of header and state; the file is also a weights file", "[checkpoint]") {
  TempDir dir("vitddp_ckpt_");
  const Options o = parse_args({"--model", "vit_micro", "--optimizer", "adamw", "--batch-size", "4"});
  const ParamLayout L = make_param_layout(vit_config(o.model));
  const auto names = optimizer_state_names(optimizer_spec(o));
  const TrainState s = some_state(L, names, 5);
  const std::string path = dir.file("run.ckpt.h5");
  write_checkpoint(path, L, header_for(o, 6), s);
  CHECK(fs::exists(path));
  CHECK_FALSE(fs::exists(path + ".tmp"));

  const CheckpointHeader h = read_checkpoint_header(path);
  CHECK(h.model == "vit_micro");
  CHECK(h.step == 6);
  CHECK(h.world_size == 2);
  CHECK(h.batches_consumed == std::vector<int64_t>{6, 6});
  CHECK(h.lr_decay_steps == 14);
  CHECK(h.options.size() == option_values(o).size());
  CHECK(checkpoint_mismatch(h, o, 2).empty());

  const TrainState back = read_checkpoint_state(path, L, names);
  CHECK(back.params == s.params);
  CHECK(back.optimizer == s.optimizer);
  CHECK(back.optimizer_steps == 5);

  std::vector<float> weights(L.total);
  load_weights(path, L, weights.data());  // --init-from reads a checkpoint
  CHECK(weights == s.params);

  // A second checkpoint replaces the first under the same name.
  write_checkpoint(path, L, header_for(o, 8), some_state(L, names, 7));
  CHECK(read_checkpoint_header(path).step == 8);
}

TEST_CASE("checkpoint: a crash before the rename leaves the previous file; no half-written file under the name",
          "[checkpoint]") {
  TempDir dir("vitddp_ckpt_");
  const Options o = parse_args({"--model", "vit_micro", "--momentum", "0.9"});
  const ParamLayout L = make_param_layout(vit_config(o.model));
  const auto names = optimizer_state_names(optimizer_spec(o));
  const std::string path = dir.file("c.h5");
  struct Crash {};
  // No previous checkpoint: nothing under the final name; the .tmp is cleaned up on an error.
  CHECK_THROWS_AS(write_checkpoint(path, L, header_for(o, 2), some_state(L, names, 2), [] { throw Crash{}; }), Crash);
  CHECK_FALSE(fs::exists(path));
  CHECK_FALSE(fs::exists(path + ".tmp"));
  // With a previous checkpoint: it stays, intact.
  write_checkpoint(path, L, header_for(o, 2), some_state(L, names, 2));
  bool tmp_complete = false;
  CHECK_THROWS_AS(write_checkpoint(path, L, header_for(o, 4), some_state(L, names, 4),
                                   [&] {
                                     // The hook runs with the .tmp closed and complete.
                                     tmp_complete = read_checkpoint_header(path + ".tmp").step == 4;
                                     throw Crash{};
                                   }),
                  Crash);
  CHECK(tmp_complete);
  CHECK(read_checkpoint_header(path).step == 2);
  // A missing directory is named.
  CHECK(message_of([&] { write_checkpoint(dir.file("no/such.h5"), L, header_for(o, 1), some_state(L, names, 1)); })
            .find("directory '" + dir.file("no") + "' does not exist") != std::string::npos);
}

TEST_CASE("checkpoint: resume checks name the option that differs", "[checkpoint]") {
  const Options o = parse_args({"--model", "vit_micro", "--batch-size", "4", "--optimizer", "adamw",
                                "--lr-schedule", "cosine", "--steps", "6", "--warmup-steps", "1", "--cooldown-steps", "1"});
  const CheckpointHeader h = header_for(o, 4);
  CHECK(checkpoint_mismatch(h, o, 2).empty());
  CHECK(checkpoint_mismatch(h, o, 4).rfind("ranks: the checkpoint was written by 2 rank(s), this run has 4", 0) == 0);
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"--model", "vit_micro", "--batch-size", "4", "--optimizer", "adamw",
                                     "--lr-schedule", "cosine", "--steps", "6", "--warmup-steps", "1", "--cooldown-steps", "1"};
    for (size_t i = 0; i + 1 < extra.size(); i += 2) {  // each "--name value" replaces or extends the base
      const auto at = std::find(args.begin(), args.end(), extra[i]);
      if (at != args.end()) *(at + 1) = extra[i + 1];
      else args.insert(args.end(), {extra[i], extra[i + 1]});
    }
    return checkpoint_mismatch(h, parse_args(args), 2);
  };
  CHECK(with({"--batch-size", "8"}) == "--batch-size: the checkpoint was written with '4', this run has '8'");
  CHECK(with({"--optimizer", "sgd"}) == "--optimizer: the checkpoint was written with 'adamw', this run has 'sgd'");
  CHECK(with({"--seed", "3"}).rfind("--seed:", 0) == 0);
  CHECK(with({"--lr", "0.5"}).rfind("--lr:", 0) == 0);
  CHECK(with({"--data", "idx:/x"}).rfind("--data:", 0) == 0);
  CHECK(with({"--adam-beta2", "0.95"}).rfind("--adam-beta2:", 0) == 0);
  // The GEMM SM target changes cuBLASLt's algorithm choice, so bit-for-bit resumes need the same one;
  // a checkpoint written before the option existed counts as 0.
  CHECK(with({"--gemm-sm-carveout", "8"}) == "--gemm-sm-carveout: the checkpoint was written with '0', this run has '8'");
  {
    CheckpointHeader old = h;
    old.options.erase(std::remove_if(old.options.begin(), old.options.end(),
                                     [](const auto& kv) { return kv.first == "gemm-sm-carveout"; }),
                      old.options.end());
    CHECK(checkpoint_mismatch(old, o, 2).empty());
    Options o8 = o;
    o8.gemm_sm_carveout = 8;
    CHECK(checkpoint_mismatch(old, o8, 2) == "--gemm-sm-carveout: the checkpoint was written with '0', this run has '8'");
  }
  // Timing-window options and files may differ; the cosine length may not (it is the run's total by default).
  CHECK(with({"--bucket-cap-mb", "50", "--out", "x.h5", "--data-workers", "1"}).empty());
  CHECK(with({"--steps", "10"}).rfind("--lr-decay-steps: the checkpoint's cosine schedule decays over 8 steps, this run's over 12", 0) == 0);
  CHECK(with({"--steps", "10", "--lr-decay-steps", "8"}).empty());  // extend the run, keep the schedule
  CHECK(with({"--steps", "2", "--lr-decay-steps", "8"}).rfind("--resume: the checkpoint is at step 4 but this run has 4 steps", 0) == 0);
  // A constant schedule does not pin the length.
  Options c = parse_args({"--model", "vit_micro"});
  CHECK(checkpoint_mismatch(header_for(c, 4), parse_args({"--model", "vit_micro", "--steps", "100"}), 2).empty());
}

TEST_CASE("checkpoint: files that are not checkpoints are refused naming the file", "[checkpoint]") {
  TempDir dir("vitddp_ckpt_");
  const ParamLayout L = make_param_layout(vit_config("vit_micro"));
  const auto p = vitddp_test::random_params(L, 3);
  save_weights(dir.file("w.h5"), L, p.data(), false);
  CHECK(message_of([&] { read_checkpoint_header(dir.file("w.h5")); }).find("is not a vitddp checkpoint") != std::string::npos);
  CHECK(message_of([&] { read_checkpoint_header(dir.file("none.h5")); }).find("no such file") != std::string::npos);
  std::ofstream(dir.file("junk.h5")) << "junk";
  CHECK(message_of([&] { read_checkpoint_header(dir.file("junk.h5")); }).find("is not an HDF5 file") != std::string::npos);
  // An optimizer group that is not there is named.
  const Options o = parse_args({"--model", "vit_micro"});
  write_checkpoint(dir.file("sgd.h5"), L, header_for(o, 1), some_state(L, {}, 1));
  CHECK(message_of([&] { read_checkpoint_state(dir.file("sgd.h5"), L, {"momentum_buffer"}); })
            .find("no group /optimizer/momentum_buffer") != std::string::npos);
}

TEST_CASE("checkpoint: file names", "[checkpoint]") {
  CHECK(default_checkpoint_path("results/run.h5") == "results/run.ckpt.h5");
  CHECK(default_checkpoint_path("run") == "run.ckpt.h5");
  CHECK(checkpoint_file("ck-{step}.h5", 40) == "ck-40.h5");
  CHECK(checkpoint_file("a{step}/b{step}", 3) == "a3/b3");
  CHECK(checkpoint_file("plain.h5", 40) == "plain.h5");
}

TEST_CASE("data sources started at batch S give the batches a source from 0 gives at S (resume)", "[checkpoint][data]") {
  BatchShape shape;
  shape.batch = 3;
  shape.channels = 1;
  shape.height = 4;
  shape.width = 4;
  shape.num_classes = 10;
  auto take = [&](HostSource& src, int n) {
    std::vector<std::vector<float>> out;
    for (int i = 0; i < n; ++i) {
      const Batch b = src.next();
      std::vector<float> v(b.images, b.images + shape.images_elems());
      for (int k = 0; k < shape.batch; ++k) v.push_back((float)b.labels[k]);
      out.push_back(v);
    }
    return out;
  };
  SECTION("synthetic") {
    HostBatchBuffers b0(shape, 3), b1(shape, 3);
    SyntheticSource from0(shape, 7, 1, b0.slots(), SourceOptions{2, 0});
    SyntheticSource from5(shape, 7, 1, b1.slots(), SourceOptions{3, 5});
    const auto all = take(from0, 9), tail = take(from5, 4);
    for (int i = 0; i < 4; ++i) CHECK(tail[i] == all[5 + i]);
  }
  SECTION("IDX, across epoch boundaries") {
    auto data = std::make_shared<IdxDataset>();
    data->count = 14;  // 2 ranks x 7 -> 2 batches of 3 per rank per epoch
    data->rows = data->cols = 2;
    for (int k = 0; k < data->count; ++k) {
      for (int i = 0; i < 4; ++i) data->pixels.push_back((uint8_t)(k * 17 + i * 5));
      data->labels.push_back((uint8_t)(k % 10));
    }
    HostBatchBuffers b0(shape, 3), b1(shape, 3);
    IdxSource from0(data, shape, 11, 1, 2, b0.slots(), SourceOptions{2, 0});
    IdxSource from3(data, shape, 11, 1, 2, b1.slots(), SourceOptions{1, 3});  // mid-epoch 1
    REQUIRE(from0.batches_per_epoch() == 2);
    const auto all = take(from0, 9), tail = take(from3, 6);
    for (int i = 0; i < 6; ++i) CHECK(tail[i] == all[3 + i]);
  }
}

TEST_CASE("CPU engine restored from a checkpoint continues bit for bit (SGD momentum, AdamW)", "[checkpoint][engine]") {
  for (const std::string optimizer : {"sgd", "adamw"}) {
    INFO(optimizer);
    TempDir dir("vitddp_ckpt_");
    Options o = parse_args({"--model", "vit_micro", "--batch-size", "4", "--init", "random", "--optimizer", optimizer,
                            "--lr", optimizer == "sgd" ? "0.1" : "0.01", "--lr-schedule", "cosine", "--lr-warmup-steps", "2",
                            "--warmup-steps", "0", "--steps", "8", "--cooldown-steps", "0", "--no-ddp"});
    if (optimizer == "sgd") o.momentum = 0.9;
    const ParamLayout L = make_param_layout(vit_config(o.model));
    const LrSchedule sched = lr_schedule(o);
    const BatchShape shape = batch_shape(L.cfg, o.batch_size);
    auto run = [&](Engine& e, int from, int to) {  // steps [from, to) on synthetic batch i = step i
      std::vector<double> losses;
      HostBatchBuffers ring(shape, 3);
      SyntheticSource src(shape, o.seed, 0, ring.slots(), SourceOptions{1, from});
      for (int i = from; i < to; ++i) {
        const Batch b = src.next();
        e.set_lr(sched.lr_at(i));
        e.stage(HostBatch{b.images, b.labels, o.batch_size});
        e.run_micro_step(0, 1);
        StepRecord r;
        e.finish_step(&r);
        losses.push_back(r.loss);
      }
      return losses;
    };
    auto whole = make_cpu_engine(o, World{}, L, {}, nullptr);
    const auto all = run(*whole, 0, 8);
    auto first = make_cpu_engine(o, World{}, L, {}, nullptr);
    run(*first, 0, 4);
    CheckpointHeader h = header_for(o, 4);
    write_checkpoint(dir.file("c.h5"), L, h, first->train_state());
    first.reset();
    const TrainState s = read_checkpoint_state(dir.file("c.h5"), L, optimizer_state_names(optimizer_spec(o)));
    auto second = make_cpu_engine(o, World{}, L, {}, &s.params);
    second->load_train_state(s);
    const auto rest = run(*second, 4, 8);
    for (int i = 0; i < 4; ++i) CHECK(rest[i] == all[4 + i]);  // bitwise
    CHECK(second->parameters() == whole->parameters());
  }
}

TEST_CASE("checkpoint_files: every --checkpoint-every-th step after the start and the last, once per name", "[checkpoint]") {
  Options o;
  o.warmup_steps = 1;
  o.steps = 6;
  o.cooldown_steps = 0;  // 7 steps in all
  CHECK(checkpoint_files(o, 0).empty());  // no --checkpoint-every
  o.checkpoint_every = 3;
  o.checkpoint_path = "c-{step}.h5";
  CHECK(checkpoint_files(o, 0) == std::vector<std::string>{"c-3.h5", "c-6.h5", "c-7.h5"});
  CHECK(checkpoint_files(o, 3) == std::vector<std::string>{"c-6.h5", "c-7.h5"});
  CHECK(checkpoint_files(o, 6) == std::vector<std::string>{"c-7.h5"});
  o.steps = 5;  // 6 steps: the last is a multiple
  CHECK(checkpoint_files(o, 0) == std::vector<std::string>{"c-3.h5", "c-6.h5"});
  o.checkpoint_path = "c.h5";
  CHECK(checkpoint_files(o, 0) == std::vector<std::string>{"c.h5"});
}

TEST_CASE("checkpoint_pattern_candidates: the files around a pattern's {step}, nothing else", "[checkpoint]") {
  vitddp_test::TempDir dir("vitddp_ckcand_");
  for (const char* f : {"ck-1.h5", "ck-x.h5", "ck-2.json", "other-3.h5", "ck-.h5"}) std::ofstream(dir.file(f)) << "x";
  std::vector<std::string> got = checkpoint_pattern_candidates(dir.file("ck-{step}.h5"));
  std::sort(got.begin(), got.end());
  // Names only by head and tail: ck-x.h5 is a candidate that checkpoint_step_of then rejects.
  CHECK(got == std::vector<std::string>{dir.file("ck-.h5"), dir.file("ck-1.h5"), dir.file("ck-x.h5")});
  CHECK(checkpoint_step_of(dir.file("ck-{step}.h5"), dir.file("ck-x.h5")) == -1);
  CHECK(checkpoint_pattern_candidates(dir.file("ck.h5")).empty());                  // no {step}
  CHECK(checkpoint_pattern_candidates(dir.file("missing/ck-{step}.h5")).empty());   // no directory: no error
}

TEST_CASE("checkpoint_step_of: the step whose checkpoint file a path names, through links and spellings", "[checkpoint]") {
  vitddp_test::TempDir dir("vitddp_ckstep_");
  const std::string pattern = dir.file("ck-{step}.h5");
  CHECK(checkpoint_step_of(pattern, dir.file("ck-7.h5")) == 7);
  CHECK(checkpoint_step_of(pattern, dir.file("./ck-12.h5")) == 12);
  CHECK(checkpoint_step_of(pattern, dir.file("ck-07.h5")) == -1);  // checkpoint_file never pads
  CHECK(checkpoint_step_of(pattern, dir.file("ck-x.h5")) == -1);
  CHECK(checkpoint_step_of(pattern, dir.file("other-7.h5")) == -1);
  CHECK(checkpoint_step_of(dir.file("ck.h5"), dir.file("ck.h5")) == -1);  // no {step}
  std::ofstream(dir.file("ck-3.h5")) << "x";
  std::filesystem::create_symlink(dir.file("ck-3.h5"), dir.file("alias.h5"));
  CHECK(checkpoint_step_of(pattern, dir.file("alias.h5")) == 3);
  CHECK(checkpoint_step_of(dir.file("a.b+{step}.h5"), dir.file("a.b+5.h5")) == 5);  // regex characters are literal
  CHECK(checkpoint_step_of(dir.file("a.b+{step}.h5"), dir.file("aXb+5.h5")) == -1);
}
