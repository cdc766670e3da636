// The optimizer wiring (src/engines/optimizer.h): options -> OptimizerSpec and LrSchedule, and the CPU
// engine's steps against model/adamw.h and model/sgd.h applied by hand to the same gradients,
// with the schedule's learning rate per step and a skipped (non-finite) step; the host Optimizer
// (make_host_optimizer) against torch's SGD and AdamW formulas written out in double.
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/adamw.h"
#include "model/cpu_vit.h"
#include "model/sgd.h"
#include "src/engines/engine.h"
#include "src/engines/optimizer.h"
#include "src/engines/zero_state.h"
#include "tests/catch.h"
#include "tests/test_util.h"

using namespace vitddp;
using vitddp_test::parse_args;

namespace {

/// Runs `steps` steps of a CPU engine with options `o` (no DDP, batch 4 of vit_micro, a new random
/// batch per step, step `poisoned` gets a NaN pixel) and, beside it, the same steps by hand: the
/// reference model's gradients, then the host optimizer's formula (make_host_optimizer) written out per optimizer
/// (adamw_step_host / sgd_step_host) with the schedule's lr, skipping the poisoned step without
/// counting it. REQUIREs bitwise equal losses, parameters and optimizer state.
void check_engine_against_hand(Options o, int steps, int poisoned) {
  o.model = "vit_micro";
  o.init = InitScheme::Random;
  o.ddp = false;
  o.batch_size = 4;
  const ParamLayout L = make_param_layout(vit_config(o.model));
  const World w;
  auto engine = make_cpu_engine(o, w, L, {}, nullptr);
  const OptimizerSpec spec = optimizer_spec(o);
  const LrSchedule sched = lr_schedule(o);

  std::vector<float> p = engine->parameters(), g(L.total), m(L.total, 0.0f), v(L.total, 0.0f);
  const std::vector<float> p0 = p;
  CpuViT<float> model(L, 4);
  int64_t applied = 0;
  for (int step = 0; step < steps; ++step) {
    const auto images = vitddp_test::random_images(L.cfg, 4, 100 + step);
    const auto labels = vitddp_test::random_labels(L.cfg, 4, 100 + step);
    const double lr = sched.lr_at(step);
    engine->set_lr(lr);
    engine->stage(HostBatch{images.data(), labels.data(), 4});
    if (step == poisoned) engine->fault_target().poison_staged_batch();
    engine->run_micro_step(0, 1);
    StepRecord rec;
    engine->finish_step(&rec);
    INFO("step " << step << " lr " << lr);
    REQUIRE(rec.nonfinite == (step == poisoned));
    if (step == poisoned) continue;  // skipped: no update, not counted (AdamW's step number stays)
    const double loss = model.forward(p.data(), images.data(), labels.data(), 4);
    model.backward(p.data(), g.data(), false);
    CHECK(rec.loss == loss);
    if (spec.kind == OptimizerKind::AdamW) {
      AdamWConfig c = spec.adamw;
      c.lr = lr;
      adamw_step_host(p.data(), g.data(), m.data(), v.data(), L.total, c, applied + 1);
    } else {
      SgdConfig c = spec.sgd;
      c.lr = lr;
      sgd_step_host(p.data(), g.data(), m.data(), L.total, c, applied == 0);
    }
    ++applied;
  }
  const TrainState s = engine->train_state();
  CHECK(s.optimizer_steps == applied);
  CHECK(s.params == p);
  CHECK(engine->parameters() == p);
  if (spec.kind == OptimizerKind::AdamW) {
    REQUIRE(s.optimizer.size() == 2);
    CHECK(s.optimizer[0].first == "exp_avg");
    CHECK(s.optimizer[1].first == "exp_avg_sq");
    CHECK(s.optimizer[0].second == m);
    CHECK(s.optimizer[1].second == v);
  } else {
    REQUIRE(s.optimizer.size() == 1);
    CHECK(s.optimizer[0].first == "momentum_buffer");
    CHECK(s.optimizer[0].second == m);
  }
  double moved = 0;
  for (size_t i = 0; i < p.size(); ++i) moved += std::fabs((double)p[i] - p0[i]);
  CHECK(moved > 1e-3);  // the comparison is not vacuous
}

}  // namespace

TEST_CASE("optimizer options: defaults are SGD, constant lr, torch's AdamW betas and eps", "[optim][options]") {
  const Options o = parse_args({});
  CHECK(o.optimizer == OptimizerKind::Sgd);
  CHECK(o.lr_schedule == LrScheduleKind::Constant);
  CHECK(o.lr_warmup_steps == 0);
  CHECK(o.lr_decay_steps == 0);
  CHECK(o.min_lr == 0);
  CHECK(o.adam_beta1 == 0.9);
  CHECK(o.adam_beta2 == 0.999);
  CHECK(o.adam_eps == 1e-8);
  CHECK(o.weight_decay == 0);  // ours; torch.optim.AdamW's default is 1e-2
  const OptimizerSpec s = optimizer_spec(o);
  CHECK(s.kind == OptimizerKind::Sgd);
  CHECK(optimizer_state_names(s).empty());
  const OptimizerSpec a = optimizer_spec(parse_args({"--optimizer", "adamw", "--adam-beta2", "0.95", "--weight-decay", "0.1"}));
  CHECK(a.kind == OptimizerKind::AdamW);
  CHECK(a.adamw.beta1 == 0.9);
  CHECK(a.adamw.beta2 == 0.95);
  CHECK(a.adamw.weight_decay == 0.1);
  CHECK(optimizer_state_names(a) == std::vector<std::string>{"exp_avg", "exp_avg_sq"});
  CHECK(optimizer_state_names(optimizer_spec(parse_args({"--momentum", "0.9"}))) ==
        std::vector<std::string>{"momentum_buffer"});
}

TEST_CASE("lr schedule from the options: warm-up and cosine end points, length = total steps", "[optim][options]") {
  // 10 + 3 + 1 = 14 steps by default: cosine from step 4 (after 4 warm-up steps) to step 14.
  Options o = parse_args({"--lr", "0.1", "--lr-schedule", "cosine", "--lr-warmup-steps", "4", "--min-lr", "0.01"});
  LrSchedule s = lr_schedule(o);
  CHECK(lr_decay_steps(o) == 14);
  CHECK(s.lr_at(0) == 0.0);
  CHECK(std::fabs(s.lr_at(2) - 0.05) < 1e-15);
  CHECK(std::fabs(s.lr_at(4) - 0.1) < 1e-15);                 // the peak at the end of warm-up
  CHECK(std::fabs(s.lr_at(9) - (0.01 + 0.09 * 0.5)) < 1e-15); // half way
  CHECK(std::fabs(s.lr_at(14) - 0.01) < 1e-15);               // the end: --min-lr
  CHECK(std::fabs(s.lr_at(20) - 0.01) < 1e-15);               // held after it
  o = parse_args({"--lr", "0.1", "--lr-schedule", "cosine", "--lr-decay-steps", "100", "--steps", "500"});
  CHECK(lr_schedule(o).total_steps == 100);
  CHECK(lr_schedule(o).lr_at(0) == 0.1);
  CHECK(std::fabs(lr_schedule(o).lr_at(50) - 0.05) < 1e-15);
  CHECK(lr_schedule(o).lr_at(100) == 0.0);
  // Constant with warm-up (transformers.get_constant_schedule_with_warmup).
  o = parse_args({"--lr", "0.2", "--lr-warmup-steps", "4"});
  s = lr_schedule(o);
  CHECK(s.lr_at(0) == 0.0);
  CHECK(std::fabs(s.lr_at(1) - 0.05) < 1e-15);
  CHECK(std::fabs(s.lr_at(3) - 0.15) < 1e-15);
  CHECK(s.lr_at(4) == 0.2);
  CHECK(s.lr_at(1000) == 0.2);
  CHECK(parse_args({"--lr", "0.2"}).lr == 0.2);
  CHECK(lr_schedule(parse_args({"--lr", "0.2"})).lr_at(0) == 0.2);  // no warm-up: today's behaviour
}

TEST_CASE("optimizer options: bad values and combinations name the option", "[optim][options]") {
  using vitddp_test::option_error;
  CHECK(option_error({"--optimizer", "adam"}) == "--optimizer: unknown value 'adam' (choose one of: sgd, adamw)");
  CHECK(option_error({"--lr-schedule", "linear"}).rfind("--lr-schedule: unknown value 'linear'", 0) == 0);
  CHECK(option_error({"--adam-beta1", "1"}).rfind("--adam-beta1: must be in [0,", 0) == 0);
  CHECK(option_error({"--adam-beta2", "-0.1"}).rfind("--adam-beta2: must be in [0,", 0) == 0);
  CHECK(option_error({"--adam-eps", "0"}).rfind("--adam-eps: must be in (0,", 0) == 0);
  CHECK(option_error({"--lr-warmup-steps", "-1"}).rfind("--lr-warmup-steps: must be in [0,", 0) == 0);
  CHECK(option_error({"--optimizer", "adamw", "--momentum", "0.9"}).rfind("--momentum: has no effect with --optimizer adamw (SGD only", 0) == 0);
  CHECK(option_error({"--min-lr", "0.1"}) == "--min-lr: has no effect with --lr-schedule constant (cosine only)");
  CHECK(option_error({"--lr-decay-steps", "10"}) == "--lr-decay-steps: has no effect with --lr-schedule constant (cosine only)");
  CHECK(option_error({"--lr-schedule", "cosine", "--lr", "0.1", "--min-lr", "0.2"}).rfind("--min-lr: must not exceed --lr", 0) == 0);
  CHECK(option_error({"--lr-schedule", "cosine", "--lr-warmup-steps", "14"}).rfind("--lr-warmup-steps: must be less than", 0) == 0);
  CHECK(option_error({"--lr-schedule", "cosine", "--lr-warmup-steps", "13"}).empty());
  CHECK(option_error({"--lr-schedule", "cosine", "--lr-warmup-steps", "20", "--lr-decay-steps", "20"})
            .rfind("--lr-warmup-steps: must be less than the cosine schedule's length 20 (--lr-decay-steps)", 0) == 0);
}

TEST_CASE("CPU engine: AdamW with warm-up + cosine equals adamw_step_host by hand, a skipped step not counted",
          "[optim][engine]") {
  Options o;
  o.optimizer = OptimizerKind::AdamW;
  o.lr = 0.01;
  o.weight_decay = 0.05;
  o.adam_beta2 = 0.99;
  o.lr_schedule = LrScheduleKind::WarmupCosine;
  o.lr_warmup_steps = 2;
  o.warmup_steps = 0;
  o.steps = 6;
  o.cooldown_steps = 0;
  check_engine_against_hand(o, 6, 3);
}

TEST_CASE("CPU engine: AdamW with torch's defaults and constant lr equals adamw_step_host by hand", "[optim][engine]") {
  Options o;
  o.optimizer = OptimizerKind::AdamW;
  o.weight_decay = 1e-2;
  check_engine_against_hand(o, 3, -1);
}

TEST_CASE("CPU engine: SGD with momentum, weight decay and a schedule equals sgd_step_host by hand, first step skipped",
          "[optim][engine]") {
  Options o;
  o.lr = 0.1;
  o.momentum = 0.9;
  o.weight_decay = 0.01;
  o.lr_schedule = LrScheduleKind::WarmupCosine;
  o.warmup_steps = 0;
  o.steps = 4;
  o.cooldown_steps = 0;
  check_engine_against_hand(o, 4, 0);  // the skipped first step leaves the momentum buffer uninitialised
}

TEST_CASE("training state: check_train_state and load_train_state refuse what does not fit", "[optim][engine]") {
  Options o;
  o.model = "vit_micro";
  o.optimizer = OptimizerKind::AdamW;
  o.ddp = false;
  o.batch_size = 2;
  const ParamLayout L = make_param_layout(vit_config(o.model));
  auto engine = make_cpu_engine(o, World{}, L, {}, nullptr);
  TrainState s = engine->train_state();
  CHECK(s.optimizer_steps == 0);
  s.params[0] += 1.0f;
  s.optimizer[0].second[1] = 0.5f;
  s.optimizer_steps = 7;
  engine->load_train_state(s);
  const TrainState back = engine->train_state();
  CHECK(back.params == s.params);
  CHECK(back.optimizer == s.optimizer);
  CHECK(back.optimizer_steps == 7);

  using vitddp_test::message_of;
  TrainState bad = s;
  bad.optimizer.pop_back();
  CHECK(message_of<std::invalid_argument>([&] { engine->load_train_state(bad); }).find("optimizer buffers {exp_avg}, expected {exp_avg, exp_avg_sq}") !=
        std::string::npos);
  bad = s;
  bad.params.resize(3);
  CHECK(message_of<std::invalid_argument>([&] { engine->load_train_state(bad); }).find("params hold 3 elements") != std::string::npos);
  bad = s;
  bad.optimizer[1].second.resize(5);
  CHECK(message_of<std::invalid_argument>([&] { engine->load_train_state(bad); }).find("exp_avg_sq holds 5") != std::string::npos);
}

namespace {

/// n values in [-1, 1) from a 64-bit LCG (Knuth's MMIX constants) seeded with `seed`.
std::vector<float> lcg_values(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  for (auto& x : v) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    x = (float)((double)(seed >> 11) / 9007199254740992.0 * 2.0 - 1.0);
  }
  return v;
}

}  // namespace

TEST_CASE("host optimizer: SGD with momentum against torch.optim.SGD's formula, a skipped step not counted",
          "[optim][optimizer]") {
  const Options o = parse_args({"--lr", "0.1", "--momentum", "0.9", "--weight-decay", "0.01"});
  const size_t n = 37;
  std::vector<float> p = lcg_values(n, 1), g = lcg_values(n, 2);
  std::vector<double> ref_p(p.begin(), p.end()), ref_buf(n, 0.0);
  auto opt = make_host_optimizer(o, p.data(), g.data(), n);
  REQUIRE(opt->state_names() == std::vector<std::string>{"momentum_buffer"});
  // torch/optim/sgd.py (_single_tensor_sgd, dampening 0): g' = scale g + wd p; buf = g' on the
  // first update, else momentum buf + g'; p -= lr buf. In double: the fp32 result agrees to 1e-6.
  const double lrs[] = {0.1, 0.05, 0.02};
  for (int t = 0; t < 3; ++t) {
    const double lr = lrs[t], scale = 0.5;
    if (t == 1) {  // a skipped step (non-finite gradients): no update, not counted
      opt->end_step(false);
      continue;
    }
    opt->step(lr, scale);
    opt->end_step(true);
    for (size_t i = 0; i < n; ++i) {
      const double gi = scale * (double)g[i] + 0.01 * ref_p[i];
      ref_buf[i] = t == 0 ? gi : 0.9 * ref_buf[i] + gi;
      ref_p[i] -= lr * ref_buf[i];
    }
  }
  CHECK(opt->applied_steps() == 2);
  const auto st = opt->state();
  REQUIRE(st.size() == 1);
  for (size_t i = 0; i < n; ++i) {
    CHECK(std::fabs(p[i] - ref_p[i]) < 1e-6);
    CHECK(std::fabs(st[0].second[i] - ref_buf[i]) < 1e-6);
  }
}

TEST_CASE("host optimizer: AdamW against torch.optim.AdamW's formula; state and step count survive load_state",
          "[optim][optimizer]") {
  const Options o = parse_args({"--optimizer", "adamw", "--lr", "0.01", "--weight-decay", "0.1", "--adam-beta2", "0.95"});
  const size_t n = 29;
  std::vector<float> p = lcg_values(n, 3), g = lcg_values(n, 4);
  std::vector<double> rp(p.begin(), p.end()), rm(n, 0.0), rv(n, 0.0);
  auto opt = make_host_optimizer(o, p.data(), g.data(), n);
  REQUIRE(opt->state_names() == std::vector<std::string>{"exp_avg", "exp_avg_sq"});
  // torch/optim/adam.py (_single_tensor_adam, decoupled weight decay), step t = 1, 2 (the
  // skipped update between them is not counted).
  auto reference = [&](double lr, int t) {
    for (size_t i = 0; i < n; ++i) {
      const double gi = g[i];
      rp[i] *= 1 - lr * 0.1;
      rm[i] += (1 - 0.9) * (gi - rm[i]);
      rv[i] = rv[i] * 0.95 + (1 - 0.95) * gi * gi;
      const double denom = std::sqrt(rv[i]) / std::sqrt(1 - std::pow(0.95, t)) + 1e-8;
      rp[i] -= lr / (1 - std::pow(0.9, t)) * rm[i] / denom;
    }
  };
  opt->step(0.01, 1.0);
  opt->end_step(true);
  reference(0.01, 1);
  opt->end_step(false);  // skipped
  opt->step(0.02, 1.0);
  opt->end_step(true);
  reference(0.02, 2);
  REQUIRE(opt->applied_steps() == 2);
  const auto st = opt->state();
  for (size_t i = 0; i < n; ++i) {
    CHECK(std::fabs(p[i] - rp[i]) < 1e-5);
    CHECK(std::fabs(st[0].second[i] - rm[i]) < 1e-6);
    CHECK(std::fabs(st[1].second[i] - rv[i]) < 1e-6);
  }
  // A second optimizer loaded with the first one's state continues bit for bit (step 3 in both).
  std::vector<float> q = p;
  auto twin = make_host_optimizer(o, q.data(), g.data(), n);
  twin->load_state(TrainState{q, st, opt->applied_steps()});
  CHECK(twin->applied_steps() == 2);
  opt->step(0.005, 1.0);
  twin->step(0.005, 1.0);
  CHECK(q == p);
  CHECK(twin->state() == opt->state());
}

TEST_CASE("host optimizer over segments (ZeRO-1's chunks): the whole-buffer update bit for bit, the rest untouched",
          "[optim][optimizer][zero]") {
  // Two segments of a 41-element buffer, their state compact (9 + 11 elements); element-wise
  // updates, so per element the same arithmetic as one pass over the whole buffer.
  const std::vector<OptimizerSegment> segs = {{3, 3, 0, 9}, {25, 25, 9, 11}};
  for (const char* opt : {"sgd", "adamw"}) {
    INFO(opt);
    const Options o = std::string(opt) == "adamw"
                          ? parse_args({"--optimizer", "adamw", "--lr", "0.01", "--weight-decay", "0.1"})
                          : parse_args({"--lr", "0.1", "--momentum", "0.9", "--weight-decay", "0.01"});
    const size_t n = 41;
    const std::vector<float> p0 = lcg_values(n, 5), g = lcg_values(n, 6);
    std::vector<float> pw = p0, ps = p0;
    auto whole = make_host_optimizer(o, pw.data(), g.data(), n);
    auto part = make_host_optimizer(o, ps.data(), g.data(), 20, segs);
    CHECK(part->state_numel() == 20);
    for (int t = 0; t < 3; ++t) {
      whole->step(0.02 * (t + 1), 1.0);
      part->step(0.02 * (t + 1), 1.0);
      whole->end_step(true);
      part->end_step(true);
    }
    std::vector<char> inside(n, 0);
    const auto sw = whole->state(), ss = part->state();
    REQUIRE(ss.size() == sw.size());
    for (const OptimizerSegment& s : segs)
      for (size_t i = 0; i < s.count; ++i) {
        inside[s.param_offset + i] = 1;
        CHECK(ps[s.param_offset + i] == pw[s.param_offset + i]);
        for (size_t k = 0; k < sw.size(); ++k) CHECK(ss[k].second[s.state_offset + i] == sw[k].second[s.param_offset + i]);
      }
    for (size_t i = 0; i < n; ++i)
      if (!inside[i]) CHECK(ps[i] == p0[i]);
    CHECK(ps != p0);
  }
  // A segment past the state buffers is refused.
  const Options o = parse_args({"--lr", "0.1", "--momentum", "0.9"});
  std::vector<float> p(41), g(41);
  CHECK_THROWS_WITH(make_host_optimizer(o, p.data(), g.data(), 19, segs),
                    Catch::Contains("exceeds the state buffers of 19 elements"));
}

TEST_CASE("host optimizer over ZeRO-1 master shards (bf16 all-gather's layout): the whole-buffer update bit for bit",
          "[optim][optimizer][zero]") {
  // vit_micro's buckets on 3 ranks: each rank updates its compact master shard (parameters at
  // slot offsets, gradients at flat offsets: zero_segments(plan, MasterParams::Shard)); the shards
  // assembled equal one update of the whole flat buffer, element-wise the same arithmetic.
  const ParamLayout L = make_param_layout(vit_config("vit_micro"));
  const std::vector<Bucket> buckets = assign_buckets(L, 64, 2048);
  REQUIRE(buckets.size() > 3);
  const size_t n = L.total;
  const std::vector<float> p0 = lcg_values(n, 11), g = lcg_values(n, 12);
  for (const char* opt : {"sgd", "adamw"}) {
    INFO(opt);
    const Options o = std::string(opt) == "adamw"
                          ? parse_args({"--optimizer", "adamw", "--lr", "0.01", "--weight-decay", "0.1"})
                          : parse_args({"--lr", "0.1", "--momentum", "0.9", "--weight-decay", "0.01"});
    std::vector<float> whole = p0;
    auto ref = make_host_optimizer(o, whole.data(), g.data(), n);
    const int N = 3;
    std::vector<ShardPlan> plans;
    std::vector<std::vector<float>> masters(N);
    std::vector<std::unique_ptr<Optimizer>> opts;
    for (int r = 0; r < N; ++r) {
      plans.emplace_back(buckets, N, r);
      masters[r].resize(plans[r].slot_numel());
      plans[r].take(p0.data(), masters[r].data());
      const std::vector<OptimizerSegment> segs = zero_segments(plans[r], MasterParams::Shard);
      for (const OptimizerSegment& s : segs) CHECK(s.param_offset == s.state_offset);
      opts.push_back(make_host_optimizer(o, masters[r].data(), g.data(), plans[r].slot_numel(), segs));
    }
    for (int t = 0; t < 3; ++t) {
      ref->step(0.02 * (t + 1), 1.0);
      ref->end_step(true);
      for (auto& op : opts) {
        op->step(0.02 * (t + 1), 1.0);
        op->end_step(true);
      }
    }
    std::vector<float> all, assembled(n, -1.0f);
    for (const auto& m : masters) all.insert(all.end(), m.begin(), m.end());
    plans[0].assemble(all.data(), assembled.data());
    CHECK(assembled == whole);
    CHECK(whole != p0);
    // The training state of one rank's shard: params (masters) and state cut the same way.
    const TrainState full{whole, ref->state(), ref->applied_steps()};
    const TrainState s1 = shard_of(full, plans[1], MasterParams::Shard);
    CHECK(s1.params == masters[1]);
    CHECK(s1.optimizer == opts[1]->state());
    CHECK(shard_of(full, plans[1]).params == whole);  // MasterParams::Full keeps them whole
  }
}

TEST_CASE("gather_train_state: a one-rank master shard comes back as the full parameters", "[optimizer][zero]") {
  const ParamLayout L = make_param_layout(vit_config("vit_micro"));
  const std::vector<Bucket> buckets = assign_buckets(L, 64, 2048);
  const ShardPlan plan(buckets, 1, 0);
  const std::vector<float> p = lcg_values(L.total, 3), m = lcg_values(L.total, 4);
  std::vector<float> pshard(plan.slot_numel()), mshard(plan.slot_numel());
  plan.take(p.data(), pshard.data());
  plan.take(m.data(), mshard.data());
  const TrainState got = gather_train_state(TrainState{pshard, {{"momentum_buffer", mshard}}, 7}, plan, MasterParams::Shard);
  CHECK(got.params == p);
  REQUIRE(got.optimizer.size() == 1);
  CHECK(got.optimizer[0].second == m);
  CHECK(got.optimizer_steps == 7);
  // A master shard of the wrong size is refused by name.
  CHECK_THROWS_WITH(gather_train_state(TrainState{std::vector<float>(L.total + 1), {}, 0}, plan, MasterParams::Shard),
                    Catch::Contains("(the master shard)"));
}
