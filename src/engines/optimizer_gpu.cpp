#include "src/engines/optimizer_gpu.h"

#include <stdexcept>
#include <utility>

#include "cuda/kernels/adamw.h"
#include "cuda/kernels/cast.h"
#include "cuda/check/check_cuda.h"
#include "cuda/kernels/sgd.h"

namespace vitddp {

GpuOptimizer::GpuOptimizer(const OptimizerSpec& spec, size_t state_numel, cudaStream_t stream)
    : Optimizer(spec, state_numel), stream_(stream) {
  for (const std::string& name : state_names()) {
    // Zero: PyTorch's initial AdamW moments; for the SGD momentum buffer, so that a skipped
    // first step (non-finite gradients) changes nothing.
    state_.emplace_back(state_numel, "optimizer state " + name);
    CUDA_CHECK(cudaMemset(state_.back().get(), 0, state_numel * sizeof(float)));
  }
}

void GpuOptimizer::bind(float* params, const float* grads, const int* d_skip, __nv_bfloat16* params_bf16,
                        std::vector<OptimizerSegment> segments) {
  if (segments.empty()) segments.push_back(OptimizerSegment{0, 0, 0, state_numel()});
  check_segments(segments, state_numel(), "GPU optimizer");
  params_ = params;
  grads_ = grads;
  skip_ = d_skip;
  bf16_ = params_bf16;
  segments_ = std::move(segments);
}

void GpuOptimizer::check_bound() const {
  if (!params_ || !grads_) throw std::logic_error("GpuOptimizer::step before bind()");
}

std::vector<std::pair<std::string, std::vector<float>>> GpuOptimizer::state() const {
  std::vector<std::pair<std::string, std::vector<float>>> out;
  for (size_t b = 0; b < state_.size(); ++b) {
    std::vector<float> h(state_numel());
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    CUDA_CHECK(cudaMemcpy(h.data(), state_[b].get(), h.size() * sizeof(float), cudaMemcpyDeviceToHost));
    out.emplace_back(state_names()[b], std::move(h));
  }
  return out;
}

void GpuOptimizer::load_state(const TrainState& s) {
  for (size_t b = 0; b < state_.size(); ++b)
    CUDA_CHECK(cudaMemcpy(state_[b].get(), s.optimizer[b].second.data(), state_numel() * sizeof(float),
                          cudaMemcpyHostToDevice));
  applied_steps_ = s.optimizer_steps;
}

namespace {

/// torch.optim.SGD in one fused kernel (sgd_step_gpu).
class GpuSgd final : public GpuOptimizer {
 public:
  using GpuOptimizer::GpuOptimizer;
  void step(double lr, double grad_scale) override {
    check_bound();
    SgdConfig cfg = spec().sgd;
    cfg.lr = lr;
    cfg.grad_scale = grad_scale;
    // The momentum buffer is zeroed, so a first step skipped on the device and then repeated
    // gives the same result either way (buf = m * 0 + g). bf16: the same pass refreshes the
    // model's bf16 working copy of the weights.
    for (const OptimizerSegment& s : segments_)
      sgd_step_gpu(params_ + s.param_offset, grads_ + s.grad_offset,
                   state_.empty() ? nullptr : state_[0].get() + s.state_offset, s.count, cfg, applied_steps_ == 0,
                   stream_, skip_, bf16_ ? bf16_ + s.grad_offset : nullptr);
  }
};

/// torch.optim.AdamW in one fused kernel (adamw_step_gpu), then the bf16 working copy.
class GpuAdamW final : public GpuOptimizer {
 public:
  using GpuOptimizer::GpuOptimizer;
  void step(double lr, double grad_scale) override {
    check_bound();
    AdamWConfig cfg = spec().adamw;
    cfg.lr = lr;
    cfg.grad_scale = grad_scale;
    for (const OptimizerSegment& s : segments_) {
      adamw_step_gpu(params_ + s.param_offset, grads_ + s.grad_offset, state_[0].get() + s.state_offset,
                     state_[1].get() + s.state_offset, s.count, cfg, applied_steps_ + 1, stream_, skip_);
      // bf16: refresh the model's working copy (unchanged parameters when the step was skipped).
      if (bf16_) convert_to_bf16(params_ + s.param_offset, bf16_ + s.grad_offset, s.count, stream_);
    }
  }
};

}  // namespace

std::unique_ptr<GpuOptimizer> make_gpu_optimizer(const Options& o, size_t state_numel, cudaStream_t stream) {
  const OptimizerSpec spec = optimizer_spec(o);
  if (spec.kind == OptimizerKind::AdamW) return std::make_unique<GpuAdamW>(spec, state_numel, stream);
  return std::make_unique<GpuSgd>(spec, state_numel, stream);
}

}  // namespace vitddp
