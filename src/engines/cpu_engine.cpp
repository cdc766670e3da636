// The CPU backend: the double-accumulating reference model, MPI all-reduce, the host optimizer (src/engines/optimizer.h). It runs the
// same trainer as the GPU backend for CI, tests and machines without a GPU. With --shard-optimizer
// (ZeRO-1) the reducer reduce-scatters the gradients in place, the optimizer updates this rank's
// chunk of each bucket in the flat parameter buffer (state compact: mpi/buckets/shard_plan.h) and
// the reducer all-gathers the parameters in place, all before the step ends.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <vector>

#include "src/io/nvtx.h"
#include "model/cpu_vit.h"
#include "model/grad_ready.h"
#include "model/init.h"
#include "mpi/reducer/cpu_reducer.h"
#include "src/engines/engine.h"
#include "src/engines/optimizer.h"
#include "src/engines/zero_state.h"
#include "src/app/evaluation.h"

namespace vitddp {
namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

class CpuEngine final : public Engine, EngineDiagnostics, FaultTarget {
 public:
  CpuEngine(const Options& o, const World& w, const ParamLayout& layout, std::vector<Bucket> buckets,
            const std::vector<float>* initial_params)
      : opts_(o), world_(w), layout_(layout), buckets_(std::move(buckets)), model_(layout, o.batch_size),
        params_(layout.total), grads_(layout.total, 0.0f), lr_(o.lr) {
    if (initial_params) params_ = *initial_params;
    else init_params(layout, o.init, o.seed, params_.data());
    const auto& c = layout.cfg;
    images_.resize((size_t)o.batch_size * c.channels * c.image_size * c.image_size);
    labels_.resize(o.batch_size);
    if (o.ddp) reducer_ = std::make_unique<CpuReducer>(layout, buckets_, grads_.data(), w.world_size, reducer_options(o));
    if (const ShardPlan* plan = shard_plan()) {
      // ZeRO-1: the optimizer updates this rank's chunks of the flat buffers, its state is the shard's.
      optimizer_ = make_host_optimizer(o, params_.data(), grads_.data(), plan->slot_numel(), zero_segments(*plan));
    } else {
      optimizer_ = make_host_optimizer(o, params_.data(), grads_.data(), layout.total);
    }
    if (o.record_grad_ready) ready_order_ = std::make_unique<GradReadyOrder>(layout);
  }

  void* alloc_host(size_t bytes) override {
    void* p = std::malloc(bytes);
    if (!p) throw std::runtime_error("out of host memory allocating " + std::to_string(bytes) + " bytes");
    return p;
  }
  void free_host(void* p) override { std::free(p); }

  void stage(const HostBatch& b) override {
    std::memcpy(images_.data(), b.images, images_.size() / opts_.batch_size * b.batch * sizeof(float));
    std::memcpy(labels_.data(), b.labels, b.batch * sizeof(int32_t));
    batch_ = b.batch;
  }

  void stage_generated(uint64_t, int, uint64_t, int) override {
    throw std::logic_error("--data device needs the GPU backend");
  }

  void run_micro_step(int micro, int micro_steps) override {
    const bool last = micro == micro_steps - 1;
    if (micro == 0) {
      rec_ = StepRecord{};
      step_start_ = Clock::now();
      if (!origin_set_) {
        origin_ = step_start_;
        origin_set_ = true;
      }
      rec_.start_ms = ms_between(origin_, step_start_);
    }
    const auto t0 = Clock::now();
    {
      NvtxRange r("forward", NvtxColor::Green);
      rec_.loss += model_.forward(params_.data(), images_.data(), labels_.data(), batch_) / micro_steps;
    }
    const auto t1 = Clock::now();
    Clock::time_point t2;
    {
      NvtxRange r("backward", NvtxColor::Purple);
      if (ready_order_ && last) ready_order_->reset();
      if (reducer_ && last) {
        reducer_->prepare_for_backward(step_start_);
        model_.backward(params_.data(), grads_.data(), micro > 0, [this](const std::vector<size_t>& p) {
          mark_grad_ready(p);
          reducer_->mark_ready(p);
        });
        t2 = Clock::now();
        reducer_->finalize();
      } else if (ready_order_ && last) {  // --no-ddp --record-grad-ready
        model_.backward(params_.data(), grads_.data(), micro > 0,
                        [this](const std::vector<size_t>& p) { mark_grad_ready(p); });
        t2 = Clock::now();
      } else {
        model_.backward(params_.data(), grads_.data(), micro > 0);
        t2 = Clock::now();
      }
    }
    rec_.forward_ms += ms_between(t0, t1);
    rec_.backward_ms += ms_between(t1, t2);
    if (!last) return;
    const auto t3 = Clock::now();
    {
      NvtxRange r("optimizer step", NvtxColor::Yellow);
      rec_.nonfinite = step_nonfinite();
      // A non-finite step is skipped, as on the GPU, and not counted (AdamW's step number stays).
      if (!rec_.nonfinite) optimizer_->step(lr_, 1.0 / micro_steps);
      optimizer_->end_step(!rec_.nonfinite);
      // ZeRO-1: the updated shards back into every rank's full parameters (a skipped step changed none).
      if (shard_plan() && !rec_.nonfinite) reducer_->all_gather(params_.data());
    }
    const auto t4 = Clock::now();
    rec_.exposed_comm_ms = ms_between(t2, t3);
    rec_.optimizer_ms = ms_between(t3, t4);
    rec_.step_ms = ms_between(step_start_, t4);
    rec_.backward_end_ms = ms_between(step_start_, t2);
    if (reducer_) rec_.buckets = reducer_->times();
  }

  EvalResult evaluate(const HostBatch& b) override {
    if (b.batch < 1 || b.batch > opts_.batch_size)
      throw std::invalid_argument("CpuEngine::evaluate: batch " + std::to_string(b.batch) + " outside [1, " +
                                  std::to_string(opts_.batch_size) + "]");
    // Straight from the caller's buffers: the staged training batch (images_, labels_) stays.
    model_.forward(params_.data(), b.images, b.labels, b.batch);
    return logits_metrics(model_.logits().data(), b.labels, b.batch, layout_.cfg.num_classes);
  }

  void wait_staged_copy() override {}

  void finish_step(StepRecord* rec) override {
    *rec = rec_;
  }

  std::vector<float> parameters() const override { return params_; }
  void set_lr(double lr) override { lr_ = lr; }

  TrainState train_state() const override {
    if (const ShardPlan* plan = shard_plan())  // collective: the state's shards gathered to rank 0
      return gather_train_state([this] { return TrainState{params_, optimizer_->state(), optimizer_->applied_steps()}; },
                                *plan);
    return TrainState{params_, optimizer_->state(), optimizer_->applied_steps()};
  }

  void load_train_state(const TrainState& s) override {
    check_train_state(s, optimizer_->spec(), layout_.total);
    std::copy(s.params.begin(), s.params.end(), params_.begin());  // in place: the optimizer holds params_.data()
    if (const ShardPlan* plan = shard_plan()) {  // this rank's shard of the full state, whatever wrote it
      optimizer_->load_state(shard_of(s, *plan));
    } else {
      optimizer_->load_state(s);
    }
  }

  EngineInfo info() const override {
    EngineInfo i;
    i.backend = "cpu";
    i.device_name = cpu_model_name();
    i.versions = "CPU reference (double accumulation), MPI all-reduce";
    i.device_bytes =
        (params_.size() + grads_.size() + optimizer_->state_names().size() * optimizer_->state_numel()) * sizeof(float);
    return i;
  }

  EngineDiagnostics& diagnostics() override { return *this; }
  FaultTarget& fault_target() override { return *this; }

  // EngineDiagnostics: no communicator of its own (the MPI all-reduce fails synchronously).
  std::string async_error() override { return ""; }
  std::string nccl_transport() override { return "none (CPU backend: MPI)"; }
  void profiler(bool) override {}
  void model_parameters(std::vector<float>* fp32, std::vector<uint16_t>* bf16) const override {
    *fp32 = params_;
    bf16->clear();  // the CPU model computes in fp32 only
  }

  // FaultTarget (abort_communicator: the default, which throws).
  void poison_staged_batch() override { images_[0] = std::nanf(""); }

 private:
  /// This rank's ZeRO-1 shard (--shard-optimizer), else null.
  const ShardPlan* shard_plan() const { return reducer_ ? reducer_->shard_plan() : nullptr; }

  /// Whether the step's loss or averaged gradients hold NaN/Inf. DDP: this rank's loss and its
  /// all-reduced gradients (the same on every rank). ZeRO-1: each rank checks its loss and its
  /// chunks of the gradients (the only averaged ones it holds), then the ranks agree
  /// (all_ranks_ok), so every rank skips the same steps.
  bool step_nonfinite() const {
    bool bad = !std::isfinite(rec_.loss);
    auto check = [&](size_t first, size_t n) {
      for (size_t i = first; i < first + n && !bad; ++i) bad = !std::isfinite(grads_[i]);
    };
    if (const ShardPlan* plan = shard_plan()) {
      for (const ShardSlice& s : plan->slices()) check(s.flat_offset, s.count);
      return !all_ranks_ok(!bad);
    }
    check(0, grads_.size());
    return bad;
  }

  /// --record-grad-ready: the host clock when the backward reported group `params` (after its
  /// gradients were written), from the step's start.
  void mark_grad_ready(const std::vector<size_t>& params) {
    if (!ready_order_) return;
    ready_order_->next(params);
    rec_.grad_ready_ms.push_back(ms_between(step_start_, Clock::now()));
  }

  Options opts_;
  World world_;
  const ParamLayout& layout_;
  std::vector<Bucket> buckets_;
  CpuViT<float> model_;
  std::vector<float> params_, grads_, images_;
  std::unique_ptr<Optimizer> optimizer_;  // over params_ and grads_ (ZeRO-1: this rank's chunks of them)
  double lr_;                             // set_lr (the schedule)
  std::vector<int32_t> labels_;
  int batch_ = 0;
  std::unique_ptr<CpuReducer> reducer_;
  std::unique_ptr<GradReadyOrder> ready_order_;  // --record-grad-ready
  StepRecord rec_;
  Clock::time_point step_start_, origin_;
  bool origin_set_ = false;
};

}  // namespace

std::unique_ptr<Engine> make_cpu_engine(const Options& o, const World& w, const ParamLayout& layout,
                                        std::vector<Bucket> buckets, const std::vector<float>* initial_params) {
  return std::make_unique<CpuEngine>(o, w, layout, std::move(buckets), initial_params);
}

}  // namespace vitddp
