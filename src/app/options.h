// Command-line options of vitddp: one table (name, default, help, validation) drives parsing,
// --help and the configuration attributes written to the results file.
#pragma once
#include <cstdint>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "model/gpu_vit_options.h"
#include "mpi/reducer/reducer_options.h"
#include "src/app/option_enums.h"

namespace vitddp {

/// Every setting of a run. Defaults reproduce the seed article's experiment: torchvision
/// vit_l_32, batch 32 per rank, 10 warm-up steps, 3 timed steps, 1 cool-down step, SGD lr 1e-3,
/// DDP buckets of 25 MiB with a 1 MiB first bucket (PyTorch's defaults).
struct Options {
  std::string model = "vit_l_32";
  int num_classes = 0;              ///< 0: the variant's own (1000; 10 for vit_tiny)
  int batch_size = 32;              ///< images per rank per micro-step (micro-batch)
  int grad_accum_steps = 1;         ///< micro-steps per optimizer step (one all-reduce per step)
  int warmup_steps = 10;
  int steps = 3;                    ///< timed steps
  int cooldown_steps = 1;
  Backend backend = Backend::Auto;  ///< gpu | cpu | auto (gpu when a CUDA device is visible; main resolves it)
  DataSpec data;                    ///< synthetic | device | idx:DIR
  int data_workers = 4;             ///< host threads producing batches
  int eval_every = 0;               ///< evaluate every N optimizer steps and after the last; 0: never
  EvalSplit eval_split = EvalSplit::Test;  ///< test | train: the IDX split --eval-every evaluates
  double bucket_cap_mb = 25.0;      ///< MiB (DDP bucket_cap_mb)
  double first_bucket_mb = 1.0;     ///< MiB (torch.distributed._DEFAULT_FIRST_BUCKET_BYTES)
  bool ddp = true;                  ///< false: --no-ddp, no reducer at all
  bool overlap = true;              ///< false: --no-overlap, all buckets after backward
  int gemm_sm_carveout = 0;         ///< SMs backward's GEMMs leave to NCCL (cuBLASLt SM count target); 0: none
  /// cuBLASLt candidates timed per GEMM shape; 0, 1: the first, untimed (GpuViTOptions' default)
  int gemm_autotune = GpuViTOptions{}.gemm_autotune_candidates;
  int nccl_max_ctas = 0;            ///< cap on NCCL's thread blocks (SMs) per collective; 0: NCCL's choice
  AllReduceImpl allreduce = AllReduceImpl::Nccl;  ///< nccl | copy-engine (GPU reducer's all-reduce; mpi/transports/)
  std::optional<int> comm_streams;  ///< 1..4 copy-engine comm streams (ReducerOptions::comm_streams); empty: auto
  bool grad_as_bucket_view = true;  ///< off: separate bucket buffer + copies (--grad-as-bucket-view)
  bool shard_optimizer = false;     ///< --shard-optimizer: ZeRO stage 1 (reduce-scatter, shard update, all-gather)
  AllGatherDtype allgather_dtype = AllGatherDtype::Auto;  ///< auto | fp32 | bf16: ZeRO-1's all-gather (allgather_in_bf16)
  bool record_grad_ready = false;   ///< --record-grad-ready: each gradient-ready group's time (grad_ready/*)
  Compression compression = Compression::None;  ///< none | fp16 | bf16 | powersgd (DDP comm hook)
  bool cuda_graph = true;           ///< GPU: replay forward + backward + all-reduces as a CUDA graph (--cuda-graph)
  Precision precision = Precision::fp32;  ///< fp32 | tf32 | bf16 (GPU model numerics; model/precision.h)
  AttentionChoice attention = AttentionChoice::Auto;    ///< auto | cudnn | custom | gemm | gemm-recompute (attention core; model/kernel_choice.h)
  PatchEmbedChoice patch_embed = PatchEmbedChoice::Auto;  ///< auto | cudnn | gemm (conv_proj; model/kernel_choice.h)
  Fp32Matmul fp32_matmul = Fp32Matmul::Ieee;              ///< ieee | tf32x3 (--precision fp32's nn.Linear GEMMs)
  RecomputeChoice recompute_gelu = RecomputeChoice::Auto;  ///< auto | on | off (GELU output recomputed in backward; model/kernel_choice.h)
  int powersgd_rank = 1;            ///< PowerSGD matrix_approximation_rank
  int64_t powersgd_start_step = 1000;         ///< PowerSGD start_powerSGD_iter
  double powersgd_min_compression_rate = 2.0; ///< PowerSGD min_compression_rate
  bool powersgd_error_feedback = true;        ///< false: --powersgd-no-error-feedback
  bool powersgd_warm_start = true;            ///< false: --powersgd-no-warm-start
  OptimizerKind optimizer = OptimizerKind::Sgd;  ///< sgd | adamw (src/engines/optimizer.h)
  double lr = 1e-3;                 ///< base learning rate: the schedule's value after warm-up
  double momentum = 0.0;            ///< SGD only
  double weight_decay = 0.0;        ///< SGD: L2 added to the gradient; AdamW: decoupled (torch's AdamW default 1e-2 is not ours)
  bool optimizer_in_backward =
      false;  ///< --optimizer-in-backward: SGD applied by backward's weight-gradient GEMMs (GPU, --no-ddp)
  double adam_beta1 = 0.9;          ///< AdamW betas[0] (torch default)
  double adam_beta2 = 0.999;        ///< AdamW betas[1] (torch default)
  double adam_eps = 1e-8;           ///< AdamW eps (torch default)
  LrScheduleKind lr_schedule = LrScheduleKind::Constant;  ///< constant | cosine (model/lr_schedule.h)
  int64_t lr_warmup_steps = 0;      ///< linear warm-up of the learning rate from 0, in optimizer steps
  int64_t lr_decay_steps = 0;       ///< cosine: optimizer steps until --min-lr; 0 = the run's total steps
  double min_lr = 0.0;              ///< cosine: the learning rate at the end of the decay
  int checkpoint_every = 0;         ///< write a checkpoint every N optimizer steps (and at the end); 0 = off
  std::string checkpoint_path;      ///< checkpoint file; "{step}" is replaced by the step; empty: <out>.ckpt.h5
  std::string resume;               ///< checkpoint file to continue from; empty: start fresh
  bool debug_crash_in_checkpoint = false;  ///< fault injection: SIGKILL between the .tmp write and the rename
  uint64_t seed = 0;
  InitScheme init = InitScheme::Torchvision;  ///< torchvision | random
  std::string init_from;            ///< HDF5 weights file (torchvision names) to start from; empty: --init
  std::string save_weights;         ///< HDF5 weights file written by rank 0 at the end; empty: none
  std::string out;                  ///< results file; empty: vitddp-<model>-<time>.h5
  bool overwrite = false;
  std::string trace;                ///< Chrome trace-event JSON written by rank 0; empty: none
  int progress_every = 0;           ///< print a line every N steps (rank 0); 0: auto, about every 5 s
  int flush_every = 1;              ///< flush the results file every N steps
  NonfinitePolicy on_nonfinite = NonfinitePolicy::Stop;  ///< stop | skip: what a step with NaN/Inf loss or gradients does
  double step_timeout_s = 300;      ///< watchdog: a step not finished after this many seconds ends the job
  int debug_nan_at_step = -1;       ///< fault injection: rank 0's batch of this step gets a NaN pixel
  int debug_fail_at_step = -1;      ///< fault injection: rank debug_fail_rank fails in this step (-1: off)
  int debug_fail_rank = 0;          ///< the rank that fails (--debug-fail-at-step)
  FailMode debug_fail_mode = FailMode::Throw;  ///< throw | exit | nccl-abort (src/app/fault_injection.h)
  bool dry_run = false;             ///< run the start-up checks without writing, print the memory estimate (src/engines/memory_estimate.h), exit
  bool help = false;
  bool version = false;
  std::set<std::string> given;      ///< the options on the command line (names without "--"), defaults or not

  int total_steps() const { return warmup_steps + steps + cooldown_steps; }
  /// True when option `name` (without "--") was on the command line, even with its default value.
  bool was_given(const std::string& name) const { return given.count(name) > 0; }
};

/// Thrown for invalid command lines; what() is one line that names the option and the reason.
struct OptionError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Parses argv (argv[0] skipped): "--name value" or "--name=value", each option at most once.
/// Throws OptionError on unknown options (suggesting the nearest name), repeated options, missing
/// or malformed values, a value that is another option ("--out --overwrite"), values out of range
/// (e.g. "--batch-size: must be in [1, 65536], got '0'"), and whatever validate_options refuses
/// (not called when --help or --version is given).
Options parse_options(int argc, const char* const* argv);

/// Every rule between options that needs no file, device or MPI, in one place. Throws OptionError
/// naming the option and the reason. Among them the no-effect rule: an option given on the
/// command line (Options::given; an explicit default counts) that has no effect in this
/// configuration is refused, saying why ("--momentum: has no effect with --optimizer adamw ...").
/// Backend-dependent rules (GPU-only options with the CPU backend) apply when o.backend is gpu or
/// cpu: parse_options checks them when --backend is given, and main calls this again after it
/// resolved --backend auto, so they also apply to the resolved backend.
void validate_options(const Options& o);

/// The --help text: usage, every option with its default and meaning, examples.
std::string help_text();

/// (name, value) pairs of every option as given or defaulted, for the results file.
std::vector<std::pair<std::string, std::string>> option_values(const Options& o);

/// The reducer settings of a run (overlap, --grad-as-bucket-view, --compression and the
/// --powersgd-* options, --shard-optimizer; PowerSGD's seed is --seed), for GpuReducer / CpuReducer.
ReducerOptions reducer_options(const Options& o);

/// --allgather-dtype resolved for a run on `world_size` ranks: true when ZeRO-1 all-gathers the
/// parameters in bf16 (each rank keeps an fp32 master of its shard only; the model's parameters
/// are bf16 rounds of the masters, Megatron-LM's distributed optimizer with bf16 parameters),
/// false when it all-gathers the fp32 parameters (DDP's arithmetic) or shards nothing.
/// bf16: --allgather-dtype bf16 (validate_options requires --shard-optimizer and --precision bf16),
/// or auto with --shard-optimizer, DDP, --precision bf16 and world_size > 1 (one rank moves
/// nothing, so auto keeps it bit-identical to --no-ddp).
bool allgather_in_bf16(const Options& o, int world_size);

/// A --bucket-cap-mb / --first-bucket-mb value in whole bytes (MiB x 2^20, truncated): what
/// assign_buckets receives; 0 for values below one byte (refused by validate_options).
inline size_t bucket_limit_bytes(double mib) { return (size_t)(mib * 1048576.0); }

/// The run's buckets: assign_buckets(layout, --first-bucket-mb, --bucket-cap-mb) in bytes.
std::vector<Bucket> run_buckets(const Options& o, const ParamLayout& layout);

/// The start-up warning rank 0 prints when --compression powersgd would never compress because
/// --powersgd-start-step >= the run's total steps (warm-up + timed + cool-down); empty otherwise.
std::string powersgd_start_warning(const Options& o);

}  // namespace vitddp
