// The GPU backend: GpuViT on this rank's device, NCCL reducer on a comm stream, the GPU optimizer
// (src/engines/optimizer_gpu.h: fused SGD or AdamW). With --shard-optimizer (ZeRO-1) the reducer
// reduce-scatters the gradients in place, the optimizer updates this rank's chunk of each bucket
// in the flat parameter buffer (state compact: mpi/buckets/shard_plan.h) and the reducer
// all-gathers the parameters in place on the comm stream. The step ends when the compute stream
// is done; the all-gathers overlap the next step's forward, whose every block waits only for the
// buckets that hold its parameters (GpuViT's ParamsNeededFn; inside the CUDA graph as event-wait
// nodes on the eagerly recorded events). Whatever else reads or overwrites the parameters
// (evaluate, parameters, train_state, load_train_state) waits for all of them first.
// With the bf16 all-gather (--allgather-dtype bf16, allgather_in_bf16) each rank keeps an fp32
// master of its shard only (compact, ShardPlan::slot_numel floats): the optimizer updates the
// masters and writes their bf16 rounds into the model's bf16 copy at their flat places, the
// reducer all-gathers that copy in bf16 and sets the fp32 parameters the bf16 model reads
// (bf16_model_fp32_params) to float(bf16); checkpoints and --save-weights hold the masters.
#include <cublasLt.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "cuda/check/check_cuda.h"
#include "cuda/model/gpu_vit.h"
#include "src/io/nvtx.h"
#include "cuda/kernels/cast.h"
#include "cuda/kernels/sgd.h"  // flag_nonfinite
#include "cuda/model/step_graph.h"
#include "cuda/kernels/synthetic_data.h"
#include "model/init.h"
#include "mpi/buckets/shard_plan.h"
#include "mpi/reducer/gpu_reducer_gpu.h"
#include "mpi/world/nccl_comm_gpu.h"
#include "mpi/world/nccl_log.h"
#include "src/engines/backward_update_gpu.h"
#include "src/engines/engine.h"
#include "src/engines/gpu_model_options.h"
#include "src/engines/grad_ready_events_gpu.h"
#include "src/engines/memory_estimate.h"
#include "src/engines/optimizer_gpu.h"
#include "src/engines/zero_state.h"
#include "cuda/model/device_buffer.h"
#include "cuda/kernels/eval_metrics.h"

namespace vitddp {
namespace {

float elapsed(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  return ms;
}

class GpuEngine final : public Engine, EngineDiagnostics, FaultTarget {
 public:
  GpuEngine(const Options& o, const World& w, const ParamLayout& layout, std::vector<Bucket> buckets,
            const std::vector<float>* initial_params)
      : opts_(o), world_(w), layout_(layout), buckets_(std::move(buckets)), initial_params_(initial_params),
        lr_(o.lr) {
    // Device choice and every allocation happen before any collective, and the ranks agree on the
    // outcome before NCCL starts: one rank out of memory must not leave the others waiting inside
    // ncclCommInitRank.
    // The whole need is worked out first (src/engines/memory_estimate.h) and checked against the free
    // memory, so a batch that does not fit fails before any allocation, with the breakdown.
    const MemoryEstimate need = estimate_gpu_memory(o, layout, buckets_, w.world_size);
    std::string error;
    try {
      allocate(o, w, layout, need);
    } catch (const std::exception& e) {
      error = e.what();
      if (error.find("out of GPU memory") != std::string::npos) {
        if (error.find(" needs ") == std::string::npos) error += "; " + memory_summary(need);
        error = "--batch-size: " + error + " (lower --batch-size; --dry-run prints the breakdown)";
      }
    }
    initial_params_ = nullptr;  // copied to the device; the caller may free it
    if (!all_ranks_ok(error.empty())) throw EngineSetupError(error);
    check_distinct_gpus(w);
    if (o.ddp) {
      nccl_log_ = redirect_nccl_info_log(w.rank);
      comm_ = std::make_unique<NcclComm>(w, o.nccl_max_ctas);
      reducer_ = std::make_unique<GpuReducer>(layout, buckets_, grads_, comm_->get(), compute_, reducer_options(o));
    }
    const size_t allocated = info().device_bytes - model_->cudnn_bytes();  // cuDNN sizes its own at set-up
    if (allocated != need.persistent_bytes())
      std::fprintf(stderr, "[vitddp rank %d] warning: the memory estimate (%zu bytes) differs from what was allocated "
                   "(%zu bytes): src/engines/memory_estimate.cpp is out of date\n", w.rank, need.persistent_bytes(), allocated);
    if (w.rank == 0) {
      size_t free_b = 0, total_b = 0;
      CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
      std::printf("[vitddp] device memory of rank 0: %zu bytes allocated (estimate %zu, peak %zu with cuBLASLt "
                  "autotuning); cudaMemGetInfo: %s GiB in use of %s GiB (CUDA context and NCCL included)\n",
                  allocated, need.persistent_bytes(), need.peak_bytes(), gib(total_b - free_b).c_str(),
                  gib(total_b).c_str());
    }
  }

  ~GpuEngine() override {
    // Destroyed while an exception propagates (an error on this rank outside the training loop,
    // whose own errors MPI_Abort at once): the peers may never join this rank's queued
    // collectives, so abort the communicator before waiting for the device.
    if (std::uncaught_exceptions() > 0 && comm_) {
      try {
        comm_->abort();
      } catch (...) {  // nothing more to do on the way out
      }
    }
    cudaDeviceSynchronize();
    graphs_.clear();  // before the communicator their NCCL nodes use
    reducer_.reset();
    comm_.reset();
    model_.reset();
    optimizer_.reset();
    cudaFreeHost(loss_host_);
    cudaFreeHost(nonfinite_host_);
    for (cudaEvent_t e : {ev_origin_, ev_start_, ev_opt_, ev_end_}) cudaEventDestroy(e);
    for (auto& m : micro_ev_)
      for (cudaEvent_t e : {m.start, m.input, m.fwd, m.bwd}) cudaEventDestroy(e);
    for (auto e : ev_copied_) cudaEventDestroy(e);
    for (auto e : ev_consumed_) cudaEventDestroy(e);
    cudaStreamDestroy(copy_);
    cudaStreamDestroy(compute_);
  }

  void* alloc_host(size_t bytes) override {
    void* p = nullptr;
    CUDA_CHECK(cudaMallocHost(&p, bytes));
    return p;
  }
  void free_host(void* p) override { cudaFreeHost(p); }

  void stage(const HostBatch& b) override {
    const int s = next_slot();
    CUDA_CHECK(cudaStreamWaitEvent(copy_, ev_consumed_[s], 0));
    const size_t img = images_[s].size() / opts_.batch_size * b.batch;
    CUDA_CHECK(cudaMemcpyAsync(images_[s].get(), b.images, img * sizeof(float), cudaMemcpyHostToDevice, copy_));
    CUDA_CHECK(cudaMemcpyAsync(labels_[s].get(), b.labels, b.batch * sizeof(int32_t), cudaMemcpyHostToDevice, copy_));
    CUDA_CHECK(cudaEventRecord(ev_copied_[s], copy_));
    staged_batch_ = b.batch;
    staged_ = true;
  }

  void stage_generated(uint64_t seed, int rank, uint64_t step, int batch) override {
    const int s = next_slot();
    CUDA_CHECK(cudaStreamWaitEvent(copy_, ev_consumed_[s], 0));
    const auto& c = layout_.cfg;
    const DeviceSyntheticSource gen(batch, (size_t)c.channels * c.image_size * c.image_size, c.num_classes, seed,
                                    rank);
    gen.generate((int64_t)step, images_[s].get(), labels_[s].get(), copy_);
    CUDA_CHECK(cudaEventRecord(ev_copied_[s], copy_));
    staged_batch_ = batch;
    staged_ = true;
  }

  void run_micro_step(int micro, int micro_steps) override {
    if (!staged_) throw std::logic_error("run_micro_step without a staged batch");
    if (comm_ && comm_->aborted())
      throw std::runtime_error("the NCCL communicator was aborted (--debug-fail-mode nccl-abort): cannot run another step");
    if (micro == 0) {
      ensure_micro_events(micro_steps);
      waited_set_ = gather_set_;  // this step's forward waits for the last all-gathers, bucket by bucket
    }
    slot_ = next_slot();
    staged_ = false;
    const bool last = micro == micro_steps - 1;
    MicroEvents& ev = micro_ev_[micro];
    // --optimizer-in-backward: this step's learning rate for the weight-gradient GEMMs (the graph
    // reads it from device memory).
    if (update_) update_->set_step(step_sgd(), compute_);
    if (micro == 0) CUDA_CHECK(cudaEventRecord(ev_start_, compute_));
    if (micro == 0 && !origin_recorded_) {
      CUDA_CHECK(cudaEventRecord(ev_origin_, compute_));
      origin_recorded_ = true;
    }
    CUDA_CHECK(cudaEventRecord(ev.start, compute_));
    CUDA_CHECK(cudaStreamWaitEvent(compute_, ev_copied_[slot_], 0));
    CUDA_CHECK(cudaEventRecord(ev.input, compute_));
    if (use_graph()) {
      // Forward, backward and the bucketed all-reduces of this (input slot, micro-step, batch) as
      // one CUDA graph, captured at its first use after the first step (which ran eagerly: NCCL
      // connections are set up by then; cuBLASLt plans and their autotuning come from the tuning
      // pass before training) and replayed afterwards.
      StepGraph& g = graphs_[GraphKey{slot_, micro, micro_steps, staged_batch_, micro == 0 ? waited_set_ : -1}];
      if (!g.captured()) g.capture(compute_, [&] { enqueue_compute(micro, micro_steps); });
      NvtxRange r("forward + backward (CUDA graph)", NvtxColor::Green);
      g.launch(compute_);
    } else {
      enqueue_compute(micro, micro_steps);
    }
    CUDA_CHECK(cudaEventRecord(ev_consumed_[slot_], compute_));
    if (!last) return;
    CUDA_CHECK(cudaEventRecord(ev_opt_, compute_));
    {
      // Eager, after the graph: a few launches that take this step's learning rate.
      NvtxRange r("optimizer step", NvtxColor::Yellow);
      // Skipped on the device when the averaged gradients hold NaN/Inf (the same on every rank,
      // since the all-reduce spreads a non-finite value everywhere); finish_step() then does not
      // count the update (AdamW's step number stays, as PyTorch's GradScaler skipping step()).
      CUDA_CHECK(cudaMemsetAsync(nonfinite_.get(), 0, sizeof(int), compute_));
      if (update_) {
        // --optimizer-in-backward: backward updated the block weights already; the rest of the
        // parameters here, every new value checked (the step cannot be skipped any more: the
        // trainer stops, --on-nonfinite stop being required) and the bf16 copy refreshed.
        sgd_rest_after_backward(params_.get(), grads_, layout_.total, step_sgd(), update_->map(), nonfinite_.get(),
                                compute_, model_->bf16_weights());
      } else if (shard_) {
        // ZeRO-1: each rank sees only its chunks' averages, so the ranks agree on the flag (its loss included).
        for (const ShardSlice& sl : shard_->slices())
          flag_nonfinite(grads_ + sl.flat_offset, sl.count, nonfinite_.get(), compute_);
        flag_nonfinite(loss_.get(), micro_steps, nonfinite_.get(), compute_);
        reducer_->agree_nonfinite(nonfinite_.get(), compute_);
      } else if (reducer_ && reducer_->checks_nonfinite()) {
        reducer_->flag_nonfinite(nonfinite_.get(), compute_);  // the copy engine checked while summing
      } else {
        flag_nonfinite(grads_, layout_.total, nonfinite_.get(), compute_);
      }
      // The kernels read the flag (bound in allocate()) and refresh the bf16 working copy.
      if (!update_) optimizer_->step(lr_, 1.0 / micro_steps);
      // ZeRO-1: every rank's updated chunks back into the full parameters (and their bf16 copy) on
      // the comm stream; a skipped step gathers the unchanged chunks, which changes nothing. Not
      // waited for here: the next forward waits bucket by bucket (wait_for_gathered).
      // bf16 all-gather: the optimizer wrote the rounds of this rank's masters into the bf16 copy.
      if (shard_)
        gather_set_ = gather_bf16_ ? reducer_->all_gather_bf16(model_->bf16_weights(), params_.get(), fp32_read_, compute_)
                                   : reducer_->all_gather(params_.get(), model_->bf16_weights(), compute_);
    }
    CUDA_CHECK(cudaMemcpyAsync(loss_host_, loss_.get(), micro_steps * sizeof(float), cudaMemcpyDeviceToHost, compute_));
    CUDA_CHECK(cudaMemcpyAsync(nonfinite_host_, nonfinite_.get(), sizeof(int), cudaMemcpyDeviceToHost, compute_));
    // The step ends when the compute stream is done (ZeRO-1: the all-gathers may still run).
    CUDA_CHECK(cudaEventRecord(ev_end_, compute_));
    micro_steps_ = micro_steps;
    ++steps_enqueued_;
  }

  void finish_step(StepRecord* rec) override {
    CUDA_CHECK(cudaEventSynchronize(ev_end_));
    if (comm_) comm_->check_async_error();
    rec->input_wait_ms = rec->forward_ms = rec->backward_ms = rec->loss = 0;
    for (int j = 0; j < micro_steps_; ++j) {
      const MicroEvents& ev = micro_ev_[j];
      rec->input_wait_ms += elapsed(ev.start, ev.input);
      rec->forward_ms += elapsed(ev.input, ev.fwd);
      rec->backward_ms += elapsed(ev.fwd, ev.bwd);
      rec->loss += loss_host_[j] / micro_steps_;
    }
    rec->exposed_comm_ms = elapsed(micro_ev_[micro_steps_ - 1].bwd, ev_opt_);
    rec->optimizer_ms = elapsed(ev_opt_, ev_end_);
    rec->step_ms = elapsed(ev_start_, ev_end_);
    rec->backward_end_ms = elapsed(ev_start_, micro_ev_[micro_steps_ - 1].bwd);
    rec->start_ms = elapsed(ev_origin_, ev_start_);
    rec->nonfinite = *nonfinite_host_ != 0 || !std::isfinite(rec->loss);
    optimizer_->end_step(*nonfinite_host_ == 0);  // the kernel applied the update
    rec->buckets = reducer_ ? reducer_->times(ev_start_) : BucketTimes{};
    rec->grad_ready_ms = ready_events_ ? ready_events_->times_ms(ev_start_) : std::vector<double>{};
    // ZeRO-1: the all-gathers this step's forward waited for (the previous step's update), which
    // are complete by now; from this step's start (negative: begun before it).
    if (shard_ && waited_set_ >= 0) reducer_->gather_times(waited_set_, ev_start_, &rec->buckets);
  }

  EvalResult evaluate(const HostBatch& b) override {
    if (b.batch < 1 || b.batch > opts_.batch_size)
      throw std::invalid_argument("GpuEngine::evaluate: batch " + std::to_string(b.batch) + " outside [1, " +
                                  std::to_string(opts_.batch_size) + "]");
    if (!eval_images_.get()) allocate_eval_buffers();
    join_gathers();  // this forward reads every parameter
    // Own input buffers on the compute stream: the staged training batch (copy stream, input
    // slots) and the step's loss buffer stay untouched; stream order puts this after the last
    // optimizer step and before the next step's forward.
    const auto& c = layout_.cfg;
    const size_t img = (size_t)b.batch * c.channels * c.image_size * c.image_size;
    CUDA_CHECK(cudaMemcpyAsync(eval_images_.get(), b.images, img * sizeof(float), cudaMemcpyHostToDevice, compute_));
    CUDA_CHECK(cudaMemcpyAsync(eval_labels_.get(), b.labels, b.batch * sizeof(int32_t), cudaMemcpyHostToDevice, compute_));
    model_->forward(params_.get(), eval_images_.get(), eval_labels_.get(), b.batch, eval_loss_.get());
    eval_row_metrics(model_->logits(), eval_labels_.get(), b.batch, c.num_classes, eval_row_loss_.get(),
                     eval_row_correct_.get(), compute_);
    std::vector<float> loss(b.batch);
    std::vector<int32_t> correct(b.batch);
    CUDA_CHECK(cudaMemcpyAsync(loss.data(), eval_row_loss_.get(), b.batch * sizeof(float), cudaMemcpyDeviceToHost, compute_));
    CUDA_CHECK(cudaMemcpyAsync(correct.data(), eval_row_correct_.get(), b.batch * sizeof(int32_t),
                               cudaMemcpyDeviceToHost, compute_));
    CUDA_CHECK(cudaStreamSynchronize(compute_));
    EvalResult r;
    for (int i = 0; i < b.batch; ++i) {
      r.loss_sum += loss[i];
      r.correct += correct[i];
    }
    r.count = b.batch;
    return r;
  }

  void wait_staged_copy() override { CUDA_CHECK(cudaStreamSynchronize(copy_)); }

  /// bf16 all-gather: collective, the fp32 masters gathered to rank 0 (the other ranks get none).
  std::vector<float> parameters() const override {
    if (!gather_bf16_) return download(params_.get());
    return gather_train_state([this] { return TrainState{download(master_.get(), master_.size()), {}, 0}; }, *shard_,
                              MasterParams::Shard)
        .params;
  }

  void set_lr(double lr) override { lr_ = lr; }

  TrainState train_state() const override {
    const auto local = [this] {
      TrainState s;
      s.optimizer = optimizer_->state();
      s.optimizer_steps = optimizer_->applied_steps();
      // After the all-gathers; the bf16 all-gather's parameters are the master shard's.
      s.params = gather_bf16_ ? download(master_.get(), master_.size()) : download(params_.get());
      return s;
    };
    // ZeRO-1, collective: the shards of the optimizer state (and of the masters) gathered to rank
    // 0 (a failure of the local read on any rank ends the call on every rank).
    return shard_ ? gather_train_state(local, *shard_, gather_bf16_ ? MasterParams::Shard : MasterParams::Full) : local();
  }

  void load_train_state(const TrainState& s) override {
    check_train_state(s, optimizer_->spec(), layout_.total);
    join_gathers();  // none may still write the parameters
    CUDA_CHECK(cudaStreamSynchronize(compute_));
    const size_t bytes = layout_.total * sizeof(float);
    CUDA_CHECK(cudaMemcpy(params_.get(), s.params.data(), bytes, cudaMemcpyHostToDevice));
    if (shard_) {  // this rank's shard of the full state, whatever wrote it
      optimizer_->load_state(shard_of(s, *shard_));
    } else {
      optimizer_->load_state(s);
    }
    refresh_model_copies();  // the bf16 copy (and the masters) follow the restored parameters
  }

  EngineInfo info() const override {
    EngineInfo i;
    i.backend = "gpu";
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
    i.device_name = prop.name;
    char uuid[64];
    const unsigned char* u = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
    std::snprintf(uuid, sizeof(uuid), "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                  u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
    i.device_uuid = uuid;
    i.device_index = device_;
    int drv = 0, rt = 0;
    CUDA_CHECK(cudaDriverGetVersion(&drv));
    CUDA_CHECK(cudaRuntimeGetVersion(&rt));
    i.versions = "CUDA driver " + std::to_string(drv) + ", CUDA runtime " + std::to_string(rt) + ", NCCL " +
                 nccl_version_string() + ", cuBLASLt " + std::to_string(cublasLtGetVersion()) + ", cuDNN " +
                 std::to_string(cudnnGetVersion());
    // ZeRO-1: the state is the shard's only (state_numel).
    i.device_bytes = (params_.size() + master_.size() + own_grads_.size() +
                      optimizer_->state_names().size() * optimizer_->state_numel() + loss_.size()) *
                         sizeof(float) +
                     nonfinite_.size() * sizeof(int) + model_->device_bytes() +
                     (reducer_ ? reducer_->device_bytes() : 0) + (update_ ? update_->device_bytes() : 0);
    for (int s = 0; s < 2; ++s) i.device_bytes += images_[s].size() * sizeof(float) + labels_[s].size() * sizeof(int32_t);
    return i;
  }

  EngineDiagnostics& diagnostics() override { return *this; }
  FaultTarget& fault_target() override { return *this; }

  // EngineDiagnostics.
  std::string async_error() override {
    std::lock_guard<std::mutex> lock(comm_mu_);  // not while abort_communicator frees it
    if (!comm_) return "";
    try {
      comm_->check_async_error();
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  }

  std::string nccl_transport() override {
    if (!comm_) return "none (no DDP)";
    if (transport_.empty()) transport_ = read_nccl_transport(nccl_log_);
    // --allreduce copy-engine: NCCL carried no gradient (it may have connected for nothing else).
    if (reducer_ && reducer_->copy_engine_in_use() && transport_.rfind("copy-engine", 0) != 0)
      transport_ = "copy-engine (CUDA IPC peer-to-peer copies, " + std::to_string(reducer_->options().comm_streams) +
                   " comm stream" + (reducer_->options().comm_streams > 1 ? "s" : "") + "; NCCL: " + transport_ + ")";
    return transport_;
  }

  void profiler(bool start) override {
    if (start) CUDA_CHECK(cudaProfilerStart());
    else CUDA_CHECK(cudaProfilerStop());
  }

  void model_parameters(std::vector<float>* fp32, std::vector<uint16_t>* bf16) const override {
    *fp32 = download(params_.get());
    bf16->clear();
    if (!model_->bf16_weights()) return;
    bf16->resize(layout_.total);
    CUDA_CHECK(cudaMemcpy(bf16->data(), model_->bf16_weights(), bf16->size() * sizeof(uint16_t), cudaMemcpyDeviceToHost));
  }

  // FaultTarget.
  void poison_staged_batch() override {
    // 0xFF bytes are a NaN in IEEE 754 single precision.
    CUDA_CHECK(cudaMemsetAsync(images_[next_slot()].get(), 0xFF, sizeof(float), copy_));
    CUDA_CHECK(cudaEventRecord(ev_copied_[next_slot()], copy_));
  }

  void abort_communicator() override {
    if (!comm_) throw std::logic_error("--debug-fail-mode nccl-abort: no NCCL communicator (--no-ddp)");
    std::lock_guard<std::mutex> lock(comm_mu_);
    comm_->abort();
  }

 private:
  /// Chooses the device and allocates streams, events, buffers and the model; no collective.
  /// Throws "out of GPU memory allocating ..." before allocating any buffer when `need` does not
  /// fit in the device's free memory.
  void allocate(const Options& o, const World& w, const ParamLayout& layout, const MemoryEstimate& need) {
    device_ = select_device(w, visible_cuda_devices());
    CUDA_CHECK(cudaSetDevice(device_));
    int sms = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device_));
    if (o.gemm_sm_carveout >= sms)
      throw std::invalid_argument("--gemm-sm-carveout: " + std::to_string(o.gemm_sm_carveout) +
                                  " leaves no SM for backward's GEMMs on this GPU (" + std::to_string(sms) +
                                  " SMs; use at most " + std::to_string(sms - 1) + ")");
    CUDA_CHECK(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));  // creates the context
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    const std::string oom = out_of_memory_message(need, free_b, total_b);
    if (!oom.empty()) throw std::runtime_error(launcher_rank_label() + ": " + oom);
    CUDA_CHECK(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
    for (cudaEvent_t* e : {&ev_origin_, &ev_start_, &ev_opt_, &ev_end_}) CUDA_CHECK(cudaEventCreate(e));
    for (auto& e : ev_copied_) CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    for (auto& e : ev_consumed_) {
      CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      CUDA_CHECK(cudaEventRecord(e, compute_));
    }

    const size_t n = layout.total;
    params_ = DeviceBuffer<float>(n, "parameters");
    // ZeRO-1: the optimizer's state covers this rank's shard only (the NCCL communicator's rank is
    // the MPI rank, so the reducer's plan is the same).
    if (o.shard_optimizer && o.ddp) {
      shard_ = std::make_unique<ShardPlan>(buckets_, w.world_size, w.rank);
      bucket_of_param_.assign(layout.params.size(), 0);
      for (const Bucket& b : buckets_)
        for (size_t p : b.params) bucket_of_param_[p] = b.index;
      bucket_waited_.assign(buckets_.size(), 0);
      gather_bf16_ = allgather_in_bf16(o, w.world_size);
      if (gather_bf16_) {
        if (o.precision != Precision::bf16)
          throw std::logic_error("--allgather-dtype bf16 without --precision bf16 (validate_options refuses it)");
        master_ = DeviceBuffer<float>(shard_->slot_numel(), "fp32 master shard (--allgather-dtype bf16)");
        std::vector<size_t> read;
        for (const ParamRef& r : bf16_model_fp32_params(layout)) read.push_back(r.index);
        fp32_read_ = bucket_ranges(layout, buckets_, read);
      }
    }
    optimizer_ = make_gpu_optimizer(o, shard_ ? shard_->slot_numel() : n, compute_);  // its zeroed state buffers
    nonfinite_ = DeviceBuffer<int>(1, "non-finite flag");
    if (o.optimizer_in_backward) {
      if (o.ddp || o.grad_accum_steps != 1 || o.optimizer != OptimizerKind::Sgd || o.momentum != 0 ||
          o.weight_decay != 0 || o.on_nonfinite != NonfinitePolicy::Stop)
        throw std::logic_error(
            "--optimizer-in-backward with DDP, accumulation, AdamW, momentum, weight decay or "
            "--on-nonfinite skip (validate_options refuses them)");
      update_ = std::make_unique<BackwardUpdate>(layout);
    }
    CUDA_CHECK(cudaMallocHost(&nonfinite_host_, sizeof(int)));
    const size_t img = (size_t)o.batch_size * layout.cfg.channels * layout.cfg.image_size * layout.cfg.image_size;
    for (int s = 0; s < 2; ++s) {
      images_[s] = DeviceBuffer<float>(img, "input images");
      labels_[s] = DeviceBuffer<int32_t>(o.batch_size, "input labels");
    }
    loss_ = DeviceBuffer<float>(o.grad_accum_steps, "loss");
    CUDA_CHECK(cudaMallocHost(&loss_host_, o.grad_accum_steps * sizeof(float)));

    // Same seed on every rank -> identical replicas (what DDP's initial broadcast guarantees).
    std::vector<float> host;
    if (!initial_params_) {
      host.resize(n);
      init_params(layout, o.init, o.seed, host.data());
    }
    const float* first = initial_params_ ? initial_params_->data() : host.data();
    CUDA_CHECK(cudaMemcpy(params_.get(), first, n * sizeof(float), cudaMemcpyHostToDevice));

    // Precision, kernel choices, the engine-kept bf16 weight copy, the gradient overlay and the
    // deterministic mode of checkpointed runs: src/engines/gpu_model_options.h.
    const GpuViTOptions mo = gpu_model_options(o, layout);
    model_ = std::make_unique<GpuViT>(layout, o.batch_size, compute_, mo);
    grads_ = model_->gradients();
    if (!grads_) {
      own_grads_ = DeviceBuffer<float>(n, "gradients");
      grads_ = own_grads_.get();
    }
    if (gather_bf16_) {
      // ZeRO-1, bf16 all-gather: this rank's masters, and their rounds into its chunks of the bf16
      // copy, which the all-gather then spreads (GpuReducer::all_gather_bf16).
      optimizer_->bind(master_.get(), grads_, nonfinite_.get(), model_->bf16_weights(),
                       zero_segments(*shard_, MasterParams::Shard));
    } else if (shard_) {
      // ZeRO-1: this rank's chunks, in place; the bf16 working copy is refreshed after the
      // all-gather instead (GpuReducer::all_gather).
      optimizer_->bind(params_.get(), grads_, nonfinite_.get(), nullptr, zero_segments(*shard_));
    } else {
      optimizer_->bind(params_.get(), grads_, nonfinite_.get(), model_->bf16_weights());
    }
    // On the compute stream (the overlaid gradients share memory with activations), then wait.
    CUDA_CHECK(cudaMemsetAsync(grads_, 0, n * sizeof(float), compute_));
    CUDA_CHECK(cudaStreamSynchronize(compute_));
    if (o.eval_every > 0) allocate_eval_buffers();
    if (o.record_grad_ready) ready_events_ = std::make_unique<GradReadyEvents>(layout);
    refresh_model_copies();
    if (mo.gemm_autotune_candidates > 1) tuning_pass(o);
  }

  /// After the flat fp32 parameters were set (start-up, --init-from, --resume), the same on every
  /// rank: the model's bf16 copy := bf16(params) (round to nearest even). bf16 all-gather: this
  /// rank's masters := its shard of the parameters (ShardPlan::take, padding 0), and the
  /// parameters the bf16 model reads in fp32 := float(bf16(params)), which is what every later
  /// all_gather_bf16 leaves there, so a resumed run continues bit for bit. Synchronous.
  void refresh_model_copies() {
    const size_t n = layout_.total;
    if (!model_->bf16_weights()) return;
    convert_to_bf16(params_.get(), model_->bf16_weights(), n, compute_);
    if (gather_bf16_) {
      for (const ShardSlice& sl : shard_->slices()) {
        float* dst = master_.get() + sl.slot_offset;
        if (sl.count)
          CUDA_CHECK(cudaMemcpyAsync(dst, params_.get() + sl.flat_offset, sl.count * sizeof(float),
                                     cudaMemcpyDeviceToDevice, compute_));
        if (sl.chunk > sl.count)
          CUDA_CHECK(cudaMemsetAsync(dst + sl.count, 0, (sl.chunk - sl.count) * sizeof(float), compute_));
      }
      for (const std::vector<FlatRange>& bucket : fp32_read_)
        upcast_bf16_ranges(model_->bf16_weights(), params_.get(), bucket, compute_);
    }
    CUDA_CHECK(cudaStreamSynchronize(compute_));
  }

  /// One forward + backward on zero images, before NCCL exists, so that the cuBLASLt (and cuDNN)
  /// algorithms of the training shapes are timed on an otherwise idle GPU - not while the first
  /// step's all-reduces run beside them - and, for the backward GEMMs under --gemm-sm-carveout,
  /// while only the stand-in kernel holds the carved-out SMs. The gradients are zeroed after it.
  void tuning_pass(const Options& o) {
    const size_t n = layout_.total;
    CUDA_CHECK(cudaMemsetAsync(images_[0].get(), 0, images_[0].size() * sizeof(float), compute_));
    CUDA_CHECK(cudaMemsetAsync(labels_[0].get(), 0, labels_[0].size() * sizeof(int32_t), compute_));
    model_->forward(params_.get(), images_[0].get(), labels_[0].get(), o.batch_size, loss_.get());
    // --optimizer-in-backward: its GEMMs are timed too, on temporary outputs, and then apply a step
    // of learning rate 0 (W = 1 * W + 0 * dW: the parameters stay as they are).
    if (update_) update_->set_step(SgdConfig{0.0, 0.0, 0.0, 1.0}, compute_);
    model_->backward(params_.get(), grads_, false, {}, weight_update());
    CUDA_CHECK(cudaMemsetAsync(grads_, 0, n * sizeof(float), compute_));
    CUDA_CHECK(cudaStreamSynchronize(compute_));
  }

  /// Every rank must drive its own GPU. Ranks that each see a single GPU (one per task) all pick
  /// device 0, so compare UUIDs per host; and warn that NCCL then needs cuMem handles to reach its
  /// peers over NVLink (each process sees only its own GPU): nccl_transport records what it used.
  void check_distinct_gpus(const World& w) {
    if (!mpi_active()) return;  // a single process without MPI: nothing to compare
    const std::string me = w.hostname + " " + info().device_uuid;
    constexpr int kLen = 160;
    char mine[kLen] = {0};
    std::snprintf(mine, kLen, "%s", me.c_str());
    std::vector<char> all((size_t)kLen * w.world_size);
    MPI_CHECK(MPI_Allgather(mine, kLen, MPI_CHAR, all.data(), kLen, MPI_CHAR, MPI_COMM_WORLD));
    for (int r = 0; r < w.world_size; ++r)
      for (int q = r + 1; q < w.world_size; ++q)
        if (std::strcmp(&all[(size_t)r * kLen], &all[(size_t)q * kLen]) == 0)
          throw EngineSetupError("ranks " + std::to_string(r) + " and " + std::to_string(q) +
                                 " drive the same GPU (" + std::string(&all[(size_t)r * kLen]) +
                                 "): give each rank its own GPU");
    if (visible_cuda_devices() == 1 && w.local_size > 1 && w.local_rank == 0)
      std::printf("[vitddp] warning: each rank on %s sees a single GPU (per-task CUDA_VISIBLE_DEVICES): NCCL can "
                  "reach the other GPUs over NVLink only through cuMem handles (NCCL 2.28 on H200 does: P2P/CUMEM); "
                  "older NCCL falls back to SHM or NET - nccl_transport in the results file says which\n",
                  w.hostname.c_str());
  }

  /// Device buffers of the evaluation pass (Engine::evaluate): one batch of images and labels,
  /// the forward's mean loss, per-row loss and correct flags. Allocated with the rest when
  /// --eval-every is on (so the ranks agree on running out of memory), else at the first use.
  void allocate_eval_buffers() {
    const auto& c = layout_.cfg;
    const int n = opts_.batch_size;
    eval_images_ = DeviceBuffer<float>((size_t)n * c.channels * c.image_size * c.image_size, "evaluation images");
    eval_labels_ = DeviceBuffer<int32_t>(n, "evaluation labels");
    eval_loss_ = DeviceBuffer<float>(1, "evaluation loss");
    eval_row_loss_ = DeviceBuffer<float>(n, "evaluation per-sample loss");
    eval_row_correct_ = DeviceBuffer<int32_t>(n, "evaluation per-sample correct flags");
  }

  int next_slot() const { return slot_ ^ 1; }

  /// Forward and backward of micro-step `micro` on the input slot slot_, and, after the last
  /// micro-step, the bucketed all-reduces (the comm stream joins back before this returns). The
  /// timing events inside are event record nodes when captured (record_timing_event).
  void enqueue_compute(int micro, int micro_steps) {
    const bool last = micro == micro_steps - 1;
    MicroEvents& ev = micro_ev_[micro];
    {
      NvtxRange r("forward", NvtxColor::Green);
      // ZeRO-1: the first micro-step's blocks each wait for their buckets' all-gathers (the later
      // micro-steps follow it on the stream).
      ParamsNeededFn before;
      if (micro == 0 && waited_set_ >= 0) {
        std::fill(bucket_waited_.begin(), bucket_waited_.end(), 0);
        before = [this](const std::vector<size_t>& p) { wait_for_gathered(p); };
      }
      model_->forward(params_.get(), images_[slot_].get(), labels_[slot_].get(), staged_batch_, loss_.get() + micro,
                      before);
      record_timing_event(ev.fwd, compute_);
      // Every bucket must have been waited for: the step's reduce-scatters and optimizer (graph
      // nodes, not stream-ordered after the eager all-gathers) follow the gathers only through
      // these waits. A parameter the forward did not report would break that silently.
      if (before && std::find(bucket_waited_.begin(), bucket_waited_.end(), 0) != bucket_waited_.end())
        throw std::logic_error("ZeRO-1: the forward did not report every parameter before reading it "
                               "(a bucket's all-gather was not waited for)");
    }
    // Micro-steps before the last accumulate locally with no communication (DDP's no_sync()).
    NvtxRange r("backward", NvtxColor::Purple);
    const bool accumulate = micro > 0;
    // --record-grad-ready: each group's event before the reducer's work for it is enqueued.
    if (ready_events_ && last) ready_events_->reset();
    if (reducer_ && last) {
      reducer_->prepare_for_backward();
      model_->backward(params_.get(), grads_, accumulate, [this](const std::vector<size_t>& p) {
        if (ready_events_) ready_events_->mark(p, compute_);
        reducer_->mark_ready(p);
      });
      record_timing_event(ev.bwd, compute_);
      reducer_->finalize();
    } else if (ready_events_ && last) {  // --no-ddp --record-grad-ready
      model_->backward(
          params_.get(), grads_, accumulate, [this](const std::vector<size_t>& p) { ready_events_->mark(p, compute_); },
          weight_update());
      record_timing_event(ev.bwd, compute_);
    } else {
      model_->backward(params_.get(), grads_, accumulate, {}, weight_update());
      record_timing_event(ev.bwd, compute_);
    }
  }

  /// --optimizer-in-backward: the block weights' SGD step inside backward (validate_options allows
  /// it with --no-ddp, SGD without momentum and one micro-step only); otherwise no update.
  WeightUpdate weight_update() const {
    return update_ ? WeightUpdate{params_.get(), update_->alpha_beta()} : WeightUpdate{};
  }

  /// This step's SGD settings: the run's, with the schedule's learning rate (micro-steps: 1).
  SgdConfig step_sgd() const {
    SgdConfig c = optimizer_->spec().sgd;
    c.lr = lr_;
    c.grad_scale = 1.0;
    return c;
  }

  /// CUDA graphs replay the step from the second step on, unless --cuda-graph off or PowerSGD
  /// (whose host-side state - start step, per-step iteration count - changes between steps).
  bool use_graph() const {
    return opts_.cuda_graph && steps_enqueued_ >= 1 && opts_.compression != Compression::PowerSgd;
  }

  /// Identifies a captured graph: the input slot (device pointers), micro-step index and count
  /// (accumulate flag, loss slot, reducer on the last), the batch size and, ZeRO-1's first
  /// micro-step, the all-gather event set its forward waits on (-1: none).
  struct GraphKey {
    int slot, micro, micro_steps, batch, gather_set;
    bool operator<(const GraphKey& o) const {
      return std::tie(slot, micro, micro_steps, batch, gather_set) <
             std::tie(o.slot, o.micro, o.micro_steps, o.batch, o.gather_set);
    }
  };

  /// ZeRO-1, the forward's hook: the compute stream waits for the all-gathers (event set
  /// waited_set_) of the buckets that hold `params` and that it has not waited for in this forward.
  /// Inside a capture the waits become event-wait nodes (wait_external_event); their events are
  /// recorded again only two all_gather() calls later, after this step has finished.
  void wait_for_gathered(const std::vector<size_t>& params) {
    for (size_t p : params) {
      const size_t b = bucket_of_param_.at(p);
      if (bucket_waited_[b]) continue;
      bucket_waited_[b] = 1;
      wait_external_event(compute_, reducer_->gathered(waited_set_, b));
    }
  }

  /// ZeRO-1: the compute stream waits for the last all-gathers, before work that reads or
  /// overwrites the parameters outside a training step's forward. Nothing without them.
  void join_gathers() const {
    if (shard_ && gather_set_ >= 0) CUDA_CHECK(cudaStreamWaitEvent(compute_, reducer_->params_ready(gather_set_), 0));
  }

  /// CUDA events of one micro-step on the compute stream.
  struct MicroEvents {
    cudaEvent_t start, input, fwd, bwd;
  };
  void ensure_micro_events(int n) {
    while ((int)micro_ev_.size() < n) {
      MicroEvents m;
      for (cudaEvent_t* e : {&m.start, &m.input, &m.fwd, &m.bwd}) CUDA_CHECK(cudaEventCreate(e));
      micro_ev_.push_back(m);
    }
  }
  /// A host copy of n device floats (default layout.total), after the compute stream's work and the all-gathers.
  std::vector<float> download(const float* d, size_t n = 0) const {
    std::vector<float> h(n ? n : layout_.total);
    join_gathers();
    CUDA_CHECK(cudaStreamSynchronize(compute_));
    CUDA_CHECK(cudaMemcpy(h.data(), d, h.size() * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
  }

  Options opts_;
  World world_;
  const ParamLayout& layout_;
  std::vector<Bucket> buckets_;
  const std::vector<float>* initial_params_;  // --init-from, or null
  double lr_;                                 // set_lr (the schedule)
  int device_ = 0;
  cudaStream_t compute_ = nullptr, copy_ = nullptr;
  cudaEvent_t ev_origin_, ev_start_, ev_opt_, ev_end_;  // origin: start of the first step
  bool origin_recorded_ = false;
  std::vector<MicroEvents> micro_ev_;
  int micro_steps_ = 1;
  cudaEvent_t ev_copied_[2];    // input slot s filled (copy stream)
  cudaEvent_t ev_consumed_[2];  // the micro-step reading input slot s is done with it (compute stream)
  DeviceBuffer<float> params_, own_grads_, loss_;
  float* grads_ = nullptr;  // own_grads_, or the model's overlaid buffer (GpuViT::gradients())
  std::unique_ptr<ShardPlan> shard_;   // ZeRO-1 (--shard-optimizer): this rank's shard, else null
  bool gather_bf16_ = false;           // ZeRO-1 with the bf16 all-gather (allgather_in_bf16)
  DeviceBuffer<float> master_;         // bf16 all-gather: this rank's fp32 masters (slot_numel, compact)
  std::vector<std::vector<FlatRange>> fp32_read_;  // bf16 all-gather: per bucket, the fp32-read parameters' ranges
  std::vector<size_t> bucket_of_param_;  // ZeRO-1: the bucket of each parameter (registration index)
  std::vector<char> bucket_waited_;      // ZeRO-1: per bucket, the forward being enqueued waits for it already
  int gather_set_ = -1;   // ZeRO-1: event set of the last all-gathers (GpuReducer::all_gather), -1 before any
  int waited_set_ = -1;   // ZeRO-1: the set this step's forward waits for (its all-gathers' times), -1: none
  std::unique_ptr<GpuOptimizer> optimizer_;   // counts applied updates (finish_step reads the skip flag)
  DeviceBuffer<float> eval_images_, eval_loss_, eval_row_loss_;  // Engine::evaluate
  DeviceBuffer<int32_t> eval_labels_, eval_row_correct_;
  DeviceBuffer<float> images_[2];
  DeviceBuffer<int32_t> labels_[2];
  float* loss_host_ = nullptr;
  DeviceBuffer<int> nonfinite_;
  int* nonfinite_host_ = nullptr;
  std::unique_ptr<GpuViT> model_;
  std::unique_ptr<NcclComm> comm_;
  std::mutex comm_mu_;     // async_error (watchdog thread) against abort_communicator
  std::string nccl_log_;   // NCCL's INFO log, parsed for the transport after the first step
  std::string transport_;
  std::unique_ptr<GpuReducer> reducer_;
  std::unique_ptr<GradReadyEvents> ready_events_;  // --record-grad-ready
  std::unique_ptr<BackwardUpdate> update_;         // --optimizer-in-backward, else null
  int slot_ = 1;          // slot of the running step; the next batch goes to slot_ ^ 1
  int staged_batch_ = 0;
  bool staged_ = false;
  int64_t steps_enqueued_ = 0;             // optimizer steps enqueued so far
  std::map<GraphKey, StepGraph> graphs_;   // captured forward + backward (+ all-reduce) graphs
};

}  // namespace

std::unique_ptr<Engine> make_gpu_engine(const Options& o, const World& w, const ParamLayout& layout,
                                        std::vector<Bucket> buckets, const std::vector<float>* initial_params) {
  return std::make_unique<GpuEngine>(o, w, layout, std::move(buckets), initial_params);
}

bool gpu_backend_built() { return true; }

int visible_cuda_devices() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

}  // namespace vitddp
