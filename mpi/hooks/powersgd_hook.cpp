// powerSGD_hook (PyTorch ddp_comm_hooks/powerSGD_hook.py): low-rank compression from
// start_powerSGD_iter on, the plain average before. The algorithm and its state are the
// backend's (HookBackend::make_powersgd: PowerSgdGpu, mpi/hooks/powersgd_gpu.h, or PowerSgdHost,
// mpi/hooks/powersgd_host.h); this hook chooses between them and the plain all-reduce.
#include <stdexcept>

#include "mpi/hooks/comm_hook.h"

namespace vitddp {

namespace {

class PowerSgdHook final : public CommHook {
 public:
  explicit PowerSgdHook(const HookArgs& a) : buckets_(a.buckets), options_(a.options.powersgd), backend_(a.backend) {}
  const char* name() const override { return "powersgd"; }
  bool reduces_own_buffers() const override { return true; }
  void allocate() override { state_ = backend_.make_powersgd(buckets_, options_); }
  size_t planned_device_bytes() const override { return backend_.planned_powersgd_bytes(buckets_, options_); }
  size_t device_bytes() const override { return state_ ? state_->device_bytes() : 0; }

  void run(GradBucket& b) override {
    if (!state_) throw std::logic_error("powersgd hook: run() before allocate()");
    if (state_->compressing()) state_->run_bucket(b);
    else b.all_reduce(b.buffer(), b.numel(), DType::F32, ReduceOp::Avg);  // vanilla all-reduce before the start step
  }
  void end_step() override {
    if (state_) state_->end_step();  // PyTorch: maybe_increase_iter at the last bucket
  }

 private:
  const std::vector<HookBucket>& buckets_;
  PowerSgdOptions options_;
  HookBackend& backend_;
  std::unique_ptr<PowerSgdState> state_;
};

}  // namespace

/// The registry's factory (mpi/hooks/registry.cpp).
std::unique_ptr<CommHook> make_powersgd_hook(const HookArgs& a) { return std::make_unique<PowerSgdHook>(a); }

}  // namespace vitddp
