// One training step on one rank, for either backend: the trainer loop drives an Engine.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/param_layout.h"
#include "mpi/buckets/buckets.h"
#include "mpi/buckets/bucket_times.h"
#include "mpi/world/world.h"
#include "src/app/options.h"
#include "src/engines/train_state.h"

namespace vitddp {

/// A batch in host memory: images [batch, C, H, W] fp32 NCHW, labels [batch] int32.
struct HostBatch {
  const float* images = nullptr;
  const int32_t* labels = nullptr;
  int batch = 0;
};

/// Timings of one step on one rank, milliseconds. GPU: from CUDA events on the compute stream,
/// relative to the step-start event; CPU: host clock.
struct StepRecord {
  double data_wait_ms = 0;      ///< host time blocked waiting for the data source (trainer)
  double input_wait_ms = 0;     ///< compute stream waiting for the batch's host-to-device copy
  double forward_ms = 0;        ///< forward + loss
  double backward_ms = 0;       ///< backward compute (the all-reduces it overlaps included)
  double exposed_comm_ms = 0;   ///< after backward compute, waiting for the last all-reduce
  double optimizer_ms = 0;      ///< optimizer step (SGD or AdamW)
  double step_ms = 0;           ///< step start to step end on the device
  double wall_ms = 0;           ///< host wall time of the whole step (trainer)
  double backward_end_ms = 0;   ///< end of the last micro-step's backward compute, from step start
  double start_ms = 0;          ///< step start, from the start of the run's first step on this rank
  bool nonfinite = false;       ///< the loss or the averaged gradients held NaN/Inf: the update was skipped
  double loss = 0;              ///< this rank's mean cross-entropy (mean over micro-steps)
  BucketTimes buckets;          ///< per bucket all-reduce start/end, relative to step start
  /// --record-grad-ready: per gradient-ready group (grad_ready_groups order), when the last
  /// micro-step's backward reported its gradients final, from step start; empty otherwise.
  std::vector<double> grad_ready_ms;
};

/// Classification metrics summed over a set of samples (one batch, one rank's shard, or the
/// whole split after the MPI reduction): summed per-sample cross-entropy (natural log, nats),
/// number of samples whose top-1 prediction (argmax of the logits, the first index on ties as
/// torch.argmax) equals the label, and the number of samples.
struct EvalResult {
  double loss_sum = 0;
  int64_t correct = 0;
  int64_t count = 0;
  /// correct / count (0 when count is 0).
  double accuracy() const { return count > 0 ? (double)correct / (double)count : 0.0; }
  /// loss_sum / count: the mean cross-entropy (0 when count is 0).
  double mean_loss() const { return count > 0 ? loss_sum / (double)count : 0.0; }
};

/// Static facts an engine reports for the results file.
struct EngineInfo {
  std::string backend;          ///< "gpu" or "cpu"
  std::string device_name;      ///< e.g. "NVIDIA H200" or the CPU model
  std::string device_uuid;
  int device_index = -1;
  std::string versions;         ///< "CUDA 13.0, NCCL 2.28.3, cuBLASLt 130100" etc.
  size_t device_bytes = 0;      ///< every buffer the engine allocated (GPU: MemoryEstimate::persistent_bytes)
};

/// Thrown on every rank when an engine could not be set up on some rank (no or too few GPUs,
/// out of memory, two ranks on one GPU): the ranks agreed on it before any collective, so they
/// all leave with exit code 2. what() is the local reason, "" on the ranks that were fine.
struct EngineSetupError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// What a run learns about an engine beside training: diagnostics for the watchdog, the results
/// file and profilers. No method changes parameters, optimizer state or the staged batch.
class EngineDiagnostics {
 public:
  virtual ~EngineDiagnostics() = default;
  /// "" or a description of an asynchronous communicator error (a peer failed). Thread-safe:
  /// called from the watchdog thread (StopControl, src/app/stop_control.h) while the training thread
  /// runs steps; never blocks on the device.
  virtual std::string async_error() = 0;
  /// NCCL's transport between this rank and its peers ("P2P [P2P/CUMEM/read]", "SHM [...]",
  /// "NET [...]"), known once a step has run (NCCL connects lazily); see mpi/world/nccl_log.h.
  /// With --allreduce copy-engine on more than one rank: "copy-engine (CUDA IPC peer-to-peer
  /// copies, N comm stream(s); NCCL: ...)" (one rank moves nothing: NCCL's transport as above).
  /// "none (no DDP)" without DDP; "none (CPU backend: MPI)" on the CPU backend. Training thread,
  /// after the last step.
  virtual std::string nccl_transport() = 0;
  /// Marks the timed window for profilers (cudaProfilerStart / cudaProfilerStop for the GPU
  /// backend, nothing for the CPU backend): `start` true at its start, false at its end.
  /// Training thread, between steps.
  virtual void profiler(bool start) = 0;
  /// Host copies of the parameter buffers the model reads (what the tests of ZeRO-1's bf16
  /// all-gather check): `fp32` the flat fp32 buffer (layout.total floats), `bf16` the bits of the
  /// GPU model's bf16 working copy (layout.total, --precision bf16; empty otherwise and on the CPU
  /// backend). Training thread, between steps; waits for the device and the all-gathers. With the
  /// fp32 all-gather or DDP the fp32 buffer is parameters(); with the bf16 all-gather only the
  /// entries of bf16_model_fp32_params (model/param_layout.h) are read, and they hold
  /// float(bf16) of the masters (the others keep their start-up values).
  virtual void model_parameters(std::vector<float>* fp32, std::vector<uint16_t>* bf16) const = 0;
};

/// The hooks of the debug fault injection (src/app/fault_injection.h: --debug-nan-at-step,
/// --debug-fail-mode). Training thread only.
class FaultTarget {
 public:
  virtual ~FaultTarget() = default;
  /// The next staged batch's first pixel becomes NaN (fp32 all-ones bits on the GPU backend,
  /// std::nanf("") on the CPU backend). Call after stage() / stage_generated() and before the
  /// run_micro_step() that consumes it.
  virtual void poison_staged_batch() = 0;
  /// ncclCommAbort on this rank's communicator now, with the step's collectives in flight; later
  /// steps throw. The peers are left inside their all-reduce. Throws std::logic_error where there
  /// is no NCCL communicator (the CPU backend, --no-ddp).
  virtual void abort_communicator() {
    throw std::logic_error("--debug-fail-mode nccl-abort: this backend has no NCCL communicator");
  }
};

/// A rank's model replica, optimizer (src/engines/optimizer.h) and reducer: what training needs. Every
/// method runs on the training thread.
class Engine {
 public:
  virtual ~Engine() = default;
  /// Host memory for a data-source buffer (pinned for the GPU backend, so copies are async).
  virtual void* alloc_host(size_t bytes) = 0;
  virtual void free_host(void* p) = 0;
  /// Starts moving the next step's batch to the device (async for the GPU backend). The host
  /// buffer must stay unchanged until finish_step() of the step that consumes it returns.
  virtual void stage(const HostBatch& b) = 0;
  /// For --data device: the next step's batch is generated on the device from (seed, rank, step).
  virtual void stage_generated(uint64_t seed, int rank, uint64_t step, int batch) = 0;
  /// Blocks until the last staged host-to-device copy has finished, so its host buffer may be
  /// reused (no-op for the CPU backend).
  virtual void wait_staged_copy() = 0;
  /// Learning rate of the optimizer steps enqueued from now on (the trainer sets the schedule's
  /// value before each step); initially opts.lr.
  virtual void set_lr(double lr) = 0;
  /// Enqueues micro-step `micro` of `micro_steps` (gradient accumulation) on the staged batch:
  /// forward and backward; micro-steps before the last accumulate gradients locally without
  /// communication (DDP's no_sync()); the last one runs the bucketed all-reduce (when DDP is on)
  /// and the optimizer with the gradient scaled by 1/micro_steps. Returns without waiting.
  virtual void run_micro_step(int micro, int micro_steps) = 0;
  /// Waits for the step (all its micro-steps) to finish and fills the engine's part of `rec`. Throws on device or
  /// communicator errors.
  virtual void finish_step(StepRecord* rec) = 0;
  /// Forward only on `b` (1 <= b.batch <= --batch-size) with the current parameters: no
  /// gradient, no communication, parameters and optimizer state unchanged, the staged training
  /// batch untouched. Returns the batch's summed cross-entropy, correct count and count (b.batch).
  /// Waits for the device; call it between steps (after finish_step). Throws
  /// std::invalid_argument on a bad batch size.
  virtual EvalResult evaluate(const HostBatch& b) = 0;
  /// A host copy of the flat fp32 parameters (layout.total floats); waits for the device. With
  /// the bf16 all-gather (--allgather-dtype bf16) these are the fp32 masters and the call is
  /// collective: every rank calls it, rank 0 gets them (assembled from every rank's master shard,
  /// gather_train_state), the other ranks an empty vector.
  virtual std::vector<float> parameters() const = 0;
  /// A host copy of the parameters and optimizer state (see TrainState, the full model's); waits
  /// for the device. Call between steps (after finish_step). With --shard-optimizer it is
  /// collective: every rank calls it, the ranks' shards are gathered to rank 0
  /// (gather_train_state, src/engines/zero_state.h), which gets the full state; the other ranks get
  /// empty buffers (and the optimizer_steps).
  virtual TrainState train_state() const = 0;
  /// Replaces parameters and optimizer state (e.g. from a checkpoint); call before the first step.
  /// `s` is the full state on every rank, as any run wrote it (sharded or not, any rank count);
  /// with --shard-optimizer each rank keeps its shard of it (shard_of). Throws
  /// std::invalid_argument when a buffer has the wrong size or the optimizer buffers do not match
  /// optimizer_state_names of the engine's optimizer (names and order).
  virtual void load_train_state(const TrainState& s) = 0;
  virtual EngineInfo info() const = 0;
  /// The engine's diagnostics, alive as long as the engine.
  virtual EngineDiagnostics& diagnostics() = 0;
  /// The engine's fault-injection hooks, alive as long as the engine.
  virtual FaultTarget& fault_target() = 0;
};

/// Builds the engine for opts.backend ("gpu" or "cpu"; "auto" must be resolved by the caller).
/// Parameters are initialised identically on every rank from opts.seed (DDP broadcasts rank 0's
/// parameters; a shared seed gives the same bits without the broadcast).
/// `initial_params` (layout.total floats, e.g. from --init-from) replaces the seeded
/// initialisation when given.
std::unique_ptr<Engine> make_gpu_engine(const Options& opts, const World& w, const ParamLayout& layout,
                                        std::vector<Bucket> buckets, const std::vector<float>* initial_params = nullptr);
std::unique_ptr<Engine> make_cpu_engine(const Options& opts, const World& w, const ParamLayout& layout,
                                        std::vector<Bucket> buckets, const std::vector<float>* initial_params = nullptr);

/// Number of CUDA devices visible to this process (0 when no driver or device, and always 0 in
/// a build without the GPU backend).
int visible_cuda_devices();

/// True when this binary has the GPU backend (CMake found the CUDA toolkit and VITDDP_GPU is ON);
/// false in the CPU-only build, where make_gpu_engine and estimate_gpu_memory
/// (src/engines/memory_estimate.h) refuse with gpu_backend_missing's line (src/engines/gpu_backend_off.cpp).
bool gpu_backend_built();

/// "<what>: this vitddp was built without the GPU backend (VITDDP_GPU=OFF)": the one line the
/// CPU-only build answers GPU-only requests with, `what` naming the option (e.g. "--backend gpu").
inline std::string gpu_backend_missing(const std::string& what) {
  return what + ": this vitddp was built without the GPU backend (VITDDP_GPU=OFF)";
}

}  // namespace vitddp
