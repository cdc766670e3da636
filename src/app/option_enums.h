// The typed values of vitddp's fixed-vocabulary command-line options, and their names. CUDA-free:
// CPU-only code and option parsing include it. The enums of other modules are reused (Precision:
// model/precision.h, LrScheduleKind: model/lr_schedule.h, InitScheme: model/init.h); the ones
// only options need live here. --compression and --allreduce name a comm hook and a transport of
// the reducer's registries (mpi/hooks/registry.cpp, mpi/transports/gpu_registry_gpu.cpp);
// reducer_options() passes their names on, and a test checks that every value here is registered.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "model/init.h"
#include "model/lr_schedule.h"
#include "model/precision.h"

namespace vitddp {

/// --compression: the DDP comm hook (PyTorch's allreduce_hook, fp16_compress_hook,
/// bf16_compress_hook, powerSGD_hook).
enum class Compression { None, Fp16, Bf16, PowerSgd };
/// --allreduce: the GPU transport of the gradient all-reduce (NCCL, or the copy engines).
enum class AllReduceImpl { Nccl, CopyEngine };
/// --allgather-dtype: the dtype ZeRO-1's all-gather moves the parameters in (--shard-optimizer):
/// fp32 (the parameters themselves), bf16 (the model's bf16 copy, rounded from this rank's fp32
/// master shard: Megatron-LM's distributed optimizer with bf16 parameters), auto (resolved by
/// allgather_in_bf16, src/app/options.h).
enum class AllGatherDtype { Auto, Fp32, Bf16 };

/// --backend: gpu (CUDA + NCCL), cpu (reference kernels + MPI all-reduce), auto (gpu when a CUDA
/// device is visible; resolved by main before training).
enum class Backend { Auto, Gpu, Cpu };

/// Value of the --data option, parsed.
struct DataSpec {
  enum class Kind {
    synthetic,  ///< host worker threads generate random batches (SyntheticSource)
    device,     ///< the GPU generates random batches in device memory (DeviceSyntheticSource)
    idx,        ///< MNIST-format files in `dir` (IdxSource)
  };
  Kind kind = Kind::synthetic;
  std::string dir;  ///< the IDX directory; empty unless kind == idx
};

/// --eval-split: the IDX split --eval-every evaluates (test = the t10k-* files, train = the training files).
enum class EvalSplit { Test, Train };

/// --attention: auto (chosen by measurement, model/kernel_choice.h), cudnn, custom, gemm, gemm-recompute.
enum class AttentionChoice { Auto, Cudnn, Custom, Gemm, GemmRecompute };

/// --patch-embed: auto (= gemm, model/kernel_choice.h), cudnn, gemm.
enum class PatchEmbedChoice { Auto, Cudnn, Gemm };

/// --recompute-gelu: auto (model/kernel_choice.h), on, off.
enum class RecomputeChoice { Auto, On, Off };

/// --fp32-matmul: how --precision fp32 runs its nn.Linear GEMMs. ieee: strict fp32 (PyTorch's
/// torch.backends.cuda.matmul.fp32_precision = "ieee"); tf32x3: three TF32 tensor-core products on
/// the operands split into TF32 hi and lo halves (XLA's DotAlgorithmPreset.TF32_TF32_F32_X3,
/// cuda/kernels/lt_gemm.h).
enum class Fp32Matmul { Ieee, Tf32x3 };

enum class OptimizerKind {
  Sgd,    ///< torch.optim.SGD (momentum, L2 weight decay), model/sgd.h
  AdamW,  ///< torch.optim.AdamW (decoupled weight decay), model/adamw.h
};

/// --on-nonfinite: what a step whose loss or averaged gradients hold NaN/Inf does (it is never applied).
enum class NonfinitePolicy { Stop, Skip };

/// --debug-fail-mode: how the chosen rank fails (src/app/fault_injection.h).
enum class FailMode {
  Throw,     ///< throws std::runtime_error: main's error path prints it and MPI_Aborts every rank
  Exit,      ///< std::_Exit(1) at once (a crash without MPI_Finalize): mpirun ends the others
  NcclAbort  ///< ncclCommAbort with the step's all-reduces in flight, then carries on (GPU only):
             ///< the peers, stuck in their all-reduce, are ended by their watchdog (RunGuard)
};

/// Every value of enum E with its command-line name, in the order --help and "choose one of" list
/// them. Specialised for each enum below (src/app/option_enums.cpp).
template <typename E>
const std::vector<std::pair<E, std::string>>& enum_names();
template <> const std::vector<std::pair<Backend, std::string>>& enum_names<Backend>();
template <> const std::vector<std::pair<EvalSplit, std::string>>& enum_names<EvalSplit>();
template <> const std::vector<std::pair<AttentionChoice, std::string>>& enum_names<AttentionChoice>();
template <> const std::vector<std::pair<PatchEmbedChoice, std::string>>& enum_names<PatchEmbedChoice>();
template <> const std::vector<std::pair<RecomputeChoice, std::string>>& enum_names<RecomputeChoice>();
template <>
const std::vector<std::pair<Fp32Matmul, std::string>>& enum_names<Fp32Matmul>();
template <> const std::vector<std::pair<OptimizerKind, std::string>>& enum_names<OptimizerKind>();
template <> const std::vector<std::pair<NonfinitePolicy, std::string>>& enum_names<NonfinitePolicy>();
template <> const std::vector<std::pair<FailMode, std::string>>& enum_names<FailMode>();
template <> const std::vector<std::pair<Precision, std::string>>& enum_names<Precision>();
template <> const std::vector<std::pair<Compression, std::string>>& enum_names<Compression>();
template <> const std::vector<std::pair<AllReduceImpl, std::string>>& enum_names<AllReduceImpl>();
template <> const std::vector<std::pair<AllGatherDtype, std::string>>& enum_names<AllGatherDtype>();
template <> const std::vector<std::pair<LrScheduleKind, std::string>>& enum_names<LrScheduleKind>();
template <> const std::vector<std::pair<InitScheme, std::string>>& enum_names<InitScheme>();

/// The command-line name of a value ("gpu", "copy-engine", "nccl-abort", ...): exactly the
/// strings the options take and the results file's option.* attributes hold.
std::string to_string(Backend v);
std::string to_string(EvalSplit v);
std::string to_string(AttentionChoice v);
std::string to_string(PatchEmbedChoice v);
std::string to_string(RecomputeChoice v);
std::string to_string(Fp32Matmul v);
std::string to_string(OptimizerKind v);
std::string to_string(NonfinitePolicy v);
std::string to_string(FailMode v);
std::string to_string(Precision v);
std::string to_string(Compression v);
std::string to_string(AllReduceImpl v);
std::string to_string(AllGatherDtype v);
std::string to_string(LrScheduleKind v);
std::string to_string(InitScheme v);
/// "synthetic", "device" or "idx:DIR".
std::string to_string(const DataSpec& d);

}  // namespace vitddp
