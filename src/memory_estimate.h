// How much device memory the GPU backend needs for a model, batch, precision and reducer, worked
// out before anything is allocated (and without a GPU: --dry-run), from the same size functions
// the allocations use (cuda/gpu_vit_arena.h, GpuReducer::planned_device_bytes).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "model/param_layout.h"
#include "mpi/buckets/buckets.h"
#include "src/options.h"

namespace vitddp {

/// One device allocation (or group of them) of the GPU engine.
struct MemoryItem {
  std::string what;   ///< short name, e.g. "activations"
  std::string detail; ///< what it holds, e.g. "the activation arena: 24 blocks ..."
  size_t bytes = 0;   ///< bytes requested from cudaMalloc
};

/// The device memory of one rank of the GPU backend, item by item in the order GpuEngine allocates
/// them. Not counted: the CUDA context, NCCL's own buffers, cuBLASLt's handle, and the
/// allocator's rounding (cudaMalloc rounds large requests up to 2 MiB).
struct MemoryEstimate {
  std::string model;                 ///< e.g. "vit_l_32"
  size_t parameter_count = 0;        ///< parameters of the model (layout.parameter_count())
  int batch = 0;                     ///< images per micro-step (--batch-size)
  std::string precision;             ///< fp32 | tf32 | bf16
  std::vector<MemoryItem> items;     ///< persistent allocations, in allocation order
  MemoryItem transient;              ///< freed again: cuBLASLt autotuning output in the tuning pass before training

  /// Sum of `items`: what stays allocated while training (EngineInfo::device_bytes).
  size_t persistent_bytes() const;
  /// persistent_bytes() + transient.bytes: the most allocated at any time.
  size_t peak_bytes() const;
  /// Bytes of the item named `what` (0 if absent).
  size_t bytes_of(const std::string& what) const;
};

/// The estimate for `o` (--model, --num-classes, --batch-size, --grad-accum-steps, --precision,
/// --momentum, --no-ddp, --grad-as-bucket-view, --compression, --powersgd-*) with the parameter
/// layout and buckets the run uses. Pure host arithmetic: no CUDA call. Throws
/// std::invalid_argument for an unknown precision or compression name. `world_size`: ranks of
/// the run (sizes the copy-engine all-reduce's scratch, --allreduce copy-engine). Defined with the
/// GPU backend (src/memory_estimate_gpu.cpp); in the CPU-only build (src/gpu_backend_off.cpp) both
/// overloads throw std::invalid_argument(gpu_backend_missing("--dry-run")).
MemoryEstimate estimate_gpu_memory(const Options& o, const ParamLayout& layout, const std::vector<Bucket>& buckets,
                                   int world_size = 1);

/// The same, building the layout and the buckets from `o` as run_training does.
MemoryEstimate estimate_gpu_memory(const Options& o, int world_size = 1);

/// One line: "vit_l_32 at batch 32, fp32 needs 5.43 GiB in all (parameters 1.14, gradients 1.14,
/// optimizer state 0, inputs 0.04, cuBLASLt workspace 0.03, activations 2.0, reducer 0, cuBLASLt
/// autotuning 0.05 while tuning; GiB)".
std::string memory_summary(const MemoryEstimate& e);

/// The --dry-run report: one row per item (bytes and GiB, what it holds), the persistent and peak
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
