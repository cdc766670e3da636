// DDP communication hooks (CUDA-free): what a bucket goes through between "ready" and
// "averaged", in the vocabulary of PyTorch's c10d (torch/csrc/distributed/c10d/comm.hpp:
// CommHookInterface, GradBucket; torch/distributed/algorithms/ddp_comm_hooks).
//
// A hook is written once against GradBucket, which both backends implement: the GPU reducer
// enqueues every operation on the bucket's comm stream (mpi/reducer/gpu_reducer_gpu.h), the CPU
// reducer runs them on the host and completes all-reduces with MPI requests
// (mpi/reducer/cpu_reducer.h). The hooks (one file each, registered in mpi/hooks/registry.cpp):
//  - "none":     allreduce_hook, the bucket averaged in fp32 (DDP's default);
//  - "fp16", "bf16": fp16_compress_hook / bf16_compress_hook: divided by the world size while cast
//                to 16 bits, all-reduced with SUM in 16 bits, cast back. Half the bytes;
//  - "powersgd": powerSGD_hook (Vogels et al. 2019), mpi/hooks/powersgd_host.h.
// With --shard-optimizer (ZeRO-1, ReducerOptions::shard_optimizer) a hook's sharded form runs
// instead: "none" is reduce_scatter_hook, the bucket averaged and reduce-scattered in place, each
// rank's chunk (mpi/buckets/shard_plan.h) averaged where it lies; the others have no sharded form.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/dtype.h"
#include "mpi/buckets/bucket_times.h"
#include "mpi/reducer/reducer_options.h"

namespace vitddp {

/// The reductions a transport offers (c10d ReduceOp SUM / AVG). Avg is the transport's own
/// average: NCCL ncclAvg; the copy engine's sum times 1/world size in its sum kernel; MPI divides
/// each element by the world size before summing (DDP's _allreduce_fut).
enum class ReduceOp { Sum, Avg };

/// One bucket as a hook sees it (c10d::GradBucket: index, buffer, the parameters' views) together
/// with the operations the hook may apply to it, which the backend implements where the bucket
/// lives. Everything is asynchronous in the backend's sense: an operation sees the results of
/// every earlier operation of this bucket (GPU: stream order; CPU: host order), except that an
/// all-reduce's result is visible only to work scheduled with then() (and after the reducer's
/// finalize()). Timings: mark() records a point of this step; compress() / allreduce() say which
/// intervals between points were what (the results file's compress_ms, allreduce_ms, bytes).
class GradBucket {
 public:
  GradBucket(size_t index, const HookBucket& tensors, int world_size)
      : index_(index), tensors_(&tensors), world_size_(world_size) {}
  virtual ~GradBucket() = default;
  GradBucket(const GradBucket&) = delete;
  GradBucket& operator=(const GradBucket&) = delete;

  size_t index() const { return index_; }
  /// The bucket's fp32 elements (numel(); device memory on the GPU backend, host memory on the CPU one).
  float* buffer() const { return buffer_; }
  size_t numel() const { return tensors_->numel; }
  /// The parameter tensors of the bucket (offsets relative to buffer()).
  const HookBucket& tensors() const { return *tensors_; }
  int world_size() const { return world_size_; }

  // ---- local work, where the bucket lives
  /// out[i] = t(x[i] / divisor) for i < n (t: F16 or BF16): cuda/kernels/compression.h's cast_to_16bit on
  /// the GPU, cast_to_16bit_host (mpi/hooks/half_host.h) on the CPU; bit-identical.
  void cast_to_16bit(const float* x, size_t n, float divisor, DType t, uint16_t* out) {
    enqueued();
    do_cast_to_16bit(x, n, divisor, t, out);
  }
  /// x[i] = float(h[i]) for i < n.
  void cast_from_16bit(const uint16_t* h, size_t n, DType t, float* x) {
    enqueued();
    do_cast_from_16bit(h, n, t, x);
  }
  /// numel() 16-bit elements of staging for this bucket (only for a hook whose
  /// uses_16bit_staging() is true; else null). GPU: shared by the buckets of one comm stream.
  virtual uint16_t* staging_16bit() = 0;

  // ---- communication, through the reducer's transport
  /// In place over all ranks: `count` elements of `t` at `data` (the bucket's buffer, its staging
  /// or the hook's own state) become their sum or average. Times itself: an all-reduce interval
  /// from the last mark (when nothing was enqueued since through this object; else a new mark)
  /// to the completion, with count x dtype_bytes(t) payload bytes.
  virtual void all_reduce(void* data, size_t count, DType t, ReduceOp op) = 0;
  /// ZeRO-1's exchange of a bucket, in place: over all ranks, the `count` elements of `t` at `data`
  /// are summed or averaged, and this rank's chunk of `data` (mpi/buckets/shard_plan.h: with
  /// c = shard_chunk(count, N), rank r's elements [r c, min(count, (r + 1) c))) receives its part
  /// of the result; the other ranks' chunks of `data` are left undefined. The result is visible as
  /// an all-reduce's. Times itself as all_reduce does (the gradient collective's interval and
  /// count x dtype_bytes(t) payload bytes, nccl-tests' reduce-scatter size).
  virtual void reduce_scatter(void* data, size_t count, DType t, ReduceOp op) = 0;
  /// The fp16/bf16 hooks' whole exchange with the casts fused into the transport (the copy
  /// engine casts, sums and decompresses its own chunk in one pass): x (count fp32, the bucket)
  /// ends as the 16-bit average in place, bit-identical to cast, all_reduce(Sum), cast back.
  /// Records the timings itself. Returns false, doing nothing, where the transport has no such
  /// path.
  virtual bool all_reduce_16bit_fused(float* x, uint16_t* staging, size_t count, DType t, float divisor) = 0;
  /// Runs `fn` once the all-reduces started so far are complete (c10d Future::then): GPU at once
  /// (the stream orders it after them), CPU after their MPI_Wait in finalize().
  virtual void then(std::function<void()> fn) = 0;

  // ---- timings
  /// Records a point of this step; returns its index.
  int mark() {
    last_mark_ = record_mark();
    fresh_ = true;
    return last_mark_;
  }
  /// The index of the last mark (-1 when none).
  int last_mark() const { return last_mark_; }
  /// [a, b] was compression or decompression work.
  void compress(int a, int b) { compress_.emplace_back(a, b); }
  /// [a, b] was all-reduce calls that sent `bytes` payload bytes.
  void allreduce(int a, int b, uint64_t bytes) {
    allreduce_.emplace_back(a, b);
    bytes_ += bytes;
  }
  void set_compressed(bool c) { compressed_ = c; }
  /// Adds durations measured by the hook itself (CPU PowerSGD's host clock).
  void add_measured(const BucketCommReport& r) { measured_.push_back(r); }
  /// Bytes, compressed flag and the summed compress / all-reduce intervals of this step.
  BucketCommReport report() const;
  /// Forgets the last step's marks and records (the backend calls it before each launch); the
  /// bucket's buffer.
  void reset(float* buffer);

 protected:
  virtual void do_cast_to_16bit(const float* x, size_t n, float divisor, DType t, uint16_t* out) = 0;
  virtual void do_cast_from_16bit(const uint16_t* h, size_t n, DType t, float* x) = 0;
  /// Records a timing point; returns its index (0, 1, ... in a step).
  virtual int record_mark() = 0;
  /// Milliseconds from point a to point b.
  virtual double interval_ms(int a, int b) const = 0;
  /// Backends call this for work they enqueue on the hook's behalf.
  void enqueued() { fresh_ = false; }
  /// The last mark when nothing was enqueued since; else a new mark.
  int start_mark() { return fresh_ && last_mark_ >= 0 ? last_mark_ : mark(); }

 private:
  size_t index_;
  const HookBucket* tensors_;
  int world_size_;
  float* buffer_ = nullptr;
  int last_mark_ = -1;
  bool fresh_ = false;
  std::vector<std::pair<int, int>> compress_, allreduce_;
  std::vector<BucketCommReport> measured_;
  uint64_t bytes_ = 0;
  bool compressed_ = false;
};

/// A comm hook (c10d::CommHookInterface): what happens to a bucket once it is complete. The
/// reducer calls run() for each bucket in bucket order, then end_step() once per step.
/// Constructing a hook allocates nothing; allocate() makes its state.
class CommHook {
 public:
  virtual ~CommHook() = default;
  /// The registry name (--compression value).
  virtual const char* name() const = 0;
  /// The bucket's gradient collective, as the NVTX range and the summary name it: "all-reduce",
  /// or "reduce-scatter" for the sharded hooks (--shard-optimizer).
  virtual const char* collective() const { return "all-reduce"; }
  /// Makes the hook's state (PowerSGD: error feedback, P and Q memories); before the first run().
  virtual void allocate() {}
  /// c10d runHook: starts the bucket's communication (the result is complete after the reducer's finalize()).
  virtual void run(GradBucket& bucket) = 0;
  /// After the last bucket of a step (PowerSGD: maybe_increase_iter at bucket.is_last()).
  virtual void end_step() {}
  /// True when run() uses GradBucket::staging_16bit().
  virtual bool uses_16bit_staging() const { return false; }
  /// True when run() all-reduces buffers of its own (PowerSGD's P and Q), not only the bucket's.
  virtual bool reduces_own_buffers() const { return false; }
  /// Device bytes allocate() takes (0 on the CPU backend), computed without allocating.
  virtual size_t planned_device_bytes() const { return 0; }
  /// Device bytes held after allocate().
  virtual size_t device_bytes() const { return 0; }
};

/// One backend's PowerSGD state and kernels (GPU: PowerSgdGpu; CPU: PowerSgdHost over the MPI
/// transport), behind the powersgd hook.
class PowerSgdState {
 public:
  virtual ~PowerSgdState() = default;
  /// True when the next bucket compresses (iteration >= start_iter).
  virtual bool compressing() const = 0;
  /// The compressed hook on `bucket` (requires compressing()).
  virtual void run_bucket(GradBucket& bucket) = 0;
  /// Increases the iteration counter (once per step, after the last bucket).
  virtual void end_step() = 0;
  virtual size_t device_bytes() const { return 0; }
};

/// What a backend lends the hooks it builds: its implementation of PowerSGD's state.
class HookBackend {
 public:
  virtual ~HookBackend() = default;
  /// Throws std::invalid_argument for bad options (make_powersgd_plan).
  virtual std::unique_ptr<PowerSgdState> make_powersgd(const std::vector<HookBucket>& buckets,
                                                       const PowerSgdOptions& options) = 0;
  /// Device bytes make_powersgd would allocate (0 on the host), without allocating.
  virtual size_t planned_powersgd_bytes(const std::vector<HookBucket>& buckets, const PowerSgdOptions& options) const = 0;
};

/// What a hook factory gets: the buckets' tensors, the options, the world size and the backend.
/// The referenced objects outlive the hook.
struct HookArgs {
  const std::vector<HookBucket>& buckets;
  const ReducerOptions& options;
  int world_size;
  HookBackend& backend;
};

/// A registry entry: the --compression value and the factory (mpi/hooks/registry.cpp).
struct CommHookEntry {
  const char* name;
  std::unique_ptr<CommHook> (*make)(const HookArgs& args);
};

/// The registered hooks, in --help order: none, fp16, bf16, powersgd.
const std::vector<CommHookEntry>& comm_hook_registry();
/// The hooks with a sharded form (--shard-optimizer), by the --compression value they stand for: none.
const std::vector<CommHookEntry>& sharded_comm_hook_registry();
/// Their names (the --compression choices).
std::vector<std::string> compression_names();
/// The hook registered as `name`; with args.options.shard_optimizer its sharded form. Throws
/// std::invalid_argument "unknown compression 'x' (choose one of: none, fp16, bf16, powersgd)" for
/// any other name, and "compression 'x' has no sharded form (--shard-optimizer takes: none)" for a
/// hook without a sharded form.
std::unique_ptr<CommHook> make_comm_hook(const std::string& name, const HookArgs& args);

/// "a, b, c" of `names` (the choices in an error message).
std::string join_names(const std::vector<std::string>& names);

}  // namespace vitddp
