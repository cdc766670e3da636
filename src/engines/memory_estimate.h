// How much device memory the GPU backend needs for a model, batch, precision and reducer, worked
// out before anything is allocated (and without a GPU: --dry-run), from the same size functions
// the allocations use (cuda/model/gpu_vit_arena.h, GpuReducer::planned_device_bytes). And how much host
// memory one rank of the CPU backend needs, mirroring the sizes CpuEngine (src/engines/cpu_engine.cpp),
// CpuViT (model/cpu_vit.cpp), CpuReducer and BatchFeed allocate.
#pragma once
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "model/param_layout.h"
#include "mpi/buckets/buckets.h"
#include "src/app/options.h"

namespace vitddp {

/// One device allocation (or group of them) of the GPU engine, or host allocation of the CPU engine.
struct MemoryItem {
  std::string what;   ///< short name, e.g. "activations"
  std::string detail; ///< what it holds, e.g. "the activation arena: 24 blocks ..."
  size_t bytes = 0;   ///< bytes requested from cudaMalloc
};

/// The device memory of one rank of the GPU backend, item by item in the order GpuEngine allocates
/// them. Not counted: the CUDA context, NCCL's own buffers, cuBLASLt's handle (and cuBLAS's, with
/// --attention gemm), and the
/// allocator's rounding (cudaMalloc rounds large requests up to 2 MiB).
struct MemoryEstimate {
  bool host = false;                 ///< true: the CPU backend's host memory (estimate_cpu_memory)
  std::string model;                 ///< e.g. "vit_l_32"
  size_t parameter_count = 0;        ///< parameters of the model (layout.parameter_count())
  int batch = 0;                     ///< images per micro-step (--batch-size)
  std::string precision;             ///< fp32 | tf32 | bf16
  std::vector<MemoryItem> items;     ///< persistent allocations, in allocation order
  MemoryItem transient;              ///< freed again: the GPU's cuBLASLt autotuning output of in-place GEMMs (gradient accumulation)
                                     ///< while they are first timed; the CPU's PowerSGD per-bucket scratch

  /// Sum of `items`: what stays allocated while training (EngineInfo::device_bytes).
  size_t persistent_bytes() const;
  /// persistent_bytes() + transient.bytes: the most allocated at any time.
  size_t peak_bytes() const;
  /// Bytes of the item named `what` (0 if absent).
  size_t bytes_of(const std::string& what) const;
};

/// The estimate for `o` (--model, --num-classes, --batch-size, --grad-accum-steps, --precision,
/// --momentum, --no-ddp, --grad-as-bucket-view, --compression, --powersgd-*, --shard-optimizer,
/// --allgather-dtype: the bf16 all-gather adds "master shard", the fp32 masters of the rank's
/// shard, ShardPlan::slot_numel floats) with the parameter layout and buckets the run uses. Pure host arithmetic: no CUDA call. Throws
/// std::invalid_argument for an unknown precision or compression name. `world_size`: ranks of
/// the run (sizes the copy-engine all-reduce's scratch, --allreduce copy-engine, and ZeRO-1's
/// shard, --shard-optimizer). Defined with the
/// GPU backend (src/engines/memory_estimate_gpu.cpp); in the CPU-only build (src/engines/gpu_backend_off.cpp) both
/// overloads throw std::invalid_argument(gpu_backend_missing("--dry-run")).
MemoryEstimate estimate_gpu_memory(const Options& o, const ParamLayout& layout, const std::vector<Bucket>& buckets,
                                   int world_size = 1);

/// The same, building the layout and the buckets from `o` as run_training does.
MemoryEstimate estimate_gpu_memory(const Options& o, int world_size = 1);

/// Bytes of CpuViT's buffers (CpuViT::allocated_bytes) for `layout` and `max_batch`, in three
/// parts: the double copy and transposes of the parameters, the activations saved for backward,
/// and the backward buffers (activation gradients and the double gradient accumulator).
struct CpuViTMemory {
  size_t weights = 0, activations = 0, backward = 0;
  size_t total() const { return weights + activations + backward; }
};
CpuViTMemory cpu_vit_memory(const ParamLayout& layout, int max_batch);

/// The host memory of one rank of the CPU backend for `o` (--model, --num-classes, --batch-size,
/// --momentum/--optimizer, --no-ddp, --grad-as-bucket-view, --compression, --powersgd-*, --data,
/// --shard-optimizer) on `world_size` ranks, item by item in the order CpuEngine and the trainer
/// allocate them: parameters, gradients, optimizer state (fp32; with --shard-optimizer of this
/// rank's shard only), the engine's input batch, the CPU model's buffers (cpu_vit_memory), the
/// reducer's (16-bit staging per bucket for fp16/bf16, the bucket buffer without
/// gradient_as_bucket_view, PowerSGD's error, P and Q; none for --shard-optimizer, whose
/// collectives run in place) and the data workers' ring of batch buffers
/// (kDefaultRingSlots). Not counted: the --data idx training split held in memory, MPI's buffers,
/// the program and its libraries, malloc's overhead. Pure arithmetic; throws
/// std::invalid_argument for bad PowerSGD options (make_powersgd_plan).
MemoryEstimate estimate_cpu_memory(const Options& o, const ParamLayout& layout, const std::vector<Bucket>& buckets,
                                   int world_size = 1);

/// The same, building the layout and the buckets from `o` as run_training does.
MemoryEstimate estimate_cpu_memory(const Options& o, int world_size = 1);

/// The optimizer's item, the same for both backends: "optimizer state", fp32, one buffer per
/// optimizer_state_names of ParamLayout::total elements, or with --shard-optimizer of this rank's
/// shard: ShardPlan::slot_numel of `buckets` on `world_size` ranks, the same on every rank. With
/// the fp32 all-gather the sharded update runs in place on the flat parameters (no master copy);
/// the bf16 all-gather's master shard is an item of its own (estimate_gpu_memory).
MemoryItem optimizer_memory(const Options& o, const ParamLayout& layout, const std::vector<Bucket>& buckets,
                            int world_size);

/// Host memory available for new processes in bytes: MemAvailable of /proc/meminfo, or, when set,
/// the environment variable VITDDP_TEST_MEMAVAILABLE_KB (kB; for tests only: it fakes the budget
/// of the host-memory check). 0 when neither can be read.
size_t mem_available_bytes();

/// "" when `ranks_on_host` ranks of estimate `e` (host memory, peak_bytes) fit in
/// `available_bytes`, or when `available_bytes` is 0 (unknown); otherwise the refusal:
/// "--backend cpu: vit_l_32 at batch 32 needs 11.9 GiB of host memory per rank, 2 ranks on this
/// host need 23.8 GiB, but only 20.1 GiB is available (use a smaller --model or --batch-size)".
std::string host_memory_refusal(const MemoryEstimate& e, int ranks_on_host, size_t available_bytes);

/// One line: "vit_l_32 at batch 16, fp32 needs 3.34 GiB in all (parameters 1.14, gradients 1.14,
/// optimizer state 0, inputs 0.02, cuBLASLt workspace 0.03, activations 0.99, reducer 0, cuBLASLt
/// autotuning 0.02 (transient); GiB)" (here with --grad-accum-steps 2).
std::string memory_summary(const MemoryEstimate& e);

/// The --dry-run report (device memory of the GPU backend, or host memory of the CPU backend when
/// e.host): one row per item (bytes and GiB, what it holds), the persistent and peak
/// totals, and what is not counted. Several lines, each ending in '\n'.
std::string memory_report(const MemoryEstimate& e);

/// "" when the peak fits in `free_bytes`; otherwise the out-of-memory message, naming the first
/// allocation (in allocation order) that no longer fits: "out of GPU memory allocating
/// activations (55.1 GiB): <memory_summary> but cudaMemGetInfo reports 40.2 GiB free of
/// 139.8 GiB". `free_bytes` and `total_bytes` as cudaMemGetInfo reports them.
std::string out_of_memory_message(const MemoryEstimate& e, size_t free_bytes, size_t total_bytes);

/// `bytes` in GiB as text with at most two decimals ("2.28", "0.03", "0").
std::string gib(size_t bytes);

}  // namespace vitddp
