#include "src/app/options.h"

#include "model/kernel_choice.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <sstream>

#include "model/vit_config.h"
#include "src/app/one_line.h"

namespace vitddp {
namespace {

[[noreturn]] void bad(const std::string& opt, const std::string& why) {
  throw OptionError(opt + ": " + why);
}

/// A value as an error message quotes it: control characters escaped (\n, \t, \xNN), so the
/// message stays one line, and at most 60 characters (then "...").
std::string shown(const std::string& v) { return one_line(v.substr(0, 60)) + (v.size() > 60 ? "..." : ""); }

// Plain decimal text: strtoll / strtod would also skip leading white space, and strtod reads
// hexadecimal ("0x10" = 16, "0x1p4" = 16).
bool decimal_text(const std::string& v) {
  return !v.empty() && !std::isspace(static_cast<unsigned char>(v[0])) && v.find_first_of("xX") == std::string::npos;
}

long long parse_int(const std::string& opt, const std::string& v, long long lo, long long hi) {
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (!decimal_text(v) || *end != '\0')
    bad(opt, "expected an integer, got '" + shown(v) + "'");
  if (errno == ERANGE || x < lo || x > hi)
    bad(opt, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" + shown(v) + "'");
  return x;
}

double parse_double(const std::string& opt, const std::string& v, double lo, double hi, bool lo_open) {
  errno = 0;
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (decimal_text(v) && *end == '\0' && errno == ERANGE && std::isfinite(x))  // strtod's underflow
    bad(opt, "'" + shown(v) + "' is closer to 0 than the smallest normal double (about 2.2e-308)");
  if (!decimal_text(v) || *end != '\0' || errno == ERANGE || !std::isfinite(x))
    bad(opt, "expected a finite number, got '" + shown(v) + "'");
  if ((lo_open ? x <= lo : x < lo) || x > hi) {
    std::ostringstream s;
    s << "must be in " << (lo_open ? "(" : "[") << lo << ", " << hi << "], got '" << shown(v) << "'";
    bad(opt, s.str());
  }
  return x;
}

/// An AdamW beta: a number in [0, 1) (torch.optim.AdamW's check).
double parse_beta(const std::string& opt, const std::string& v) {
  const double x = parse_double(opt, v, 0, 1, false);
  if (x >= 1) bad(opt, "must be in [0, 1), got '" + shown(v) + "'");
  return x;
}

std::string fmt(double x) {
  std::ostringstream s;
  s << x;
  return s.str();
}

[[noreturn]] void unknown_value(const std::string& opt, const std::string& v, const std::vector<std::string>& ok) {
  std::string list;
  for (const auto& k : ok) list += (list.empty() ? "" : ", ") + k;
  bad(opt, "unknown value '" + shown(v) + "' (choose one of: " + list + ")");
}

std::string one_of(const std::string& opt, const std::string& v, const std::vector<std::string>& ok) {
  for (const auto& k : ok)
    if (v == k) return v;
  unknown_value(opt, v, ok);
}

/// The enum value named `v` (enum_names<E>()), or OptionError "--opt: unknown value 'v' (choose one of: ...)".
template <typename E>
E parse_enum(const std::string& opt, const std::string& v) {
  std::vector<std::string> names;
  for (const auto& [value, name] : enum_names<E>()) {
    if (name == v) return value;
    names.push_back(name);
  }
  unknown_value(opt, v, names);
}

DataSpec parse_data(const std::string& v) {
  DataSpec d;
  if (v == "synthetic") return d;
  if (v == "device") {
    d.kind = DataSpec::Kind::device;
    return d;
  }
  if (v.rfind("idx:", 0) != 0) bad("--data", "unknown source '" + shown(v) + "' (choose synthetic, device or idx:DIR)");
  if (v == "idx:") bad("--data", "idx: needs a directory, e.g. idx:/usr/share/datasets/fashion-mnist");
  d.kind = DataSpec::Kind::idx;
  d.dir = v.substr(4);
  return d;
}

std::string on_off(bool b) { return b ? "on" : "off"; }
std::string true_false(bool b) { return b ? "true" : "false"; }

/// The --help sections, in the order --help prints them.
enum class Group { ModelData, Ddp, Speed, Optimizer, Outputs, Reliability, Debug };

const char* group_title(Group g) {
  switch (g) {
    case Group::ModelData: return "Model and data";
    case Group::Ddp: return "DDP and communication";
    case Group::Speed: return "Precision and speed";
    case Group::Optimizer: return "Optimizer and schedule";
    case Group::Outputs: return "Outputs";
    case Group::Reliability: return "Reliability";
    case Group::Debug: return "Debug (testing only)";
  }
  return "";
}

/// One row of the option table.
struct Spec {
  const char* name;      ///< without the leading "--"
  const char* metavar;   ///< nullptr: a flag without value
  Group group;
  const char* help;      ///< one to three lines of --help
  std::function<void(Options&, const std::string&)> set;
  std::function<std::string(const Options&)> get;
};

constexpr long long kMaxSteps = 100000000;

/// The file-name options: a non-empty string.
std::function<void(Options&, const std::string&)> set_path(const char* opt, std::string Options::*field) {
  return [opt, field](Options& o, const std::string& v) {
    if (v.empty()) bad(std::string("--") + opt, "empty file name");
    o.*field = v;
  };
}

// The table's order is the order of option_values() (the results file's option.* attributes).
const std::vector<Spec>& table() {
  static const std::vector<Spec> specs = {
      {"model", "NAME", Group::ModelData,
       "ViT variant: vit_l_32, vit_b_32, vit_l_16, vit_b_16, vit_h_14 (torchvision sizes); test sizes vit_tiny, "
       "vit_micro; 28x28 Fashion-MNIST sizes vit_fmnist, vit_fmnist_cpu",
       [](Options& o, const std::string& v) { o.model = one_of("--model", v, vit_variant_names()); },
       [](const Options& o) { return o.model; }},
      {"num-classes", "K", Group::ModelData, "classes of the head; 0 = the variant's own (1000; vit_tiny 10)",
       [](Options& o, const std::string& v) {
         o.num_classes = (int)parse_int("--num-classes", v, 0, 1000000);
         if (o.num_classes == 1) bad("--num-classes", "must be 0 (the variant's own) or at least 2, got '1'");
       },
       [](const Options& o) { return std::to_string(o.num_classes); }},
      {"batch-size", "B", Group::ModelData, "images per rank per micro-step",
       [](Options& o, const std::string& v) { o.batch_size = (int)parse_int("--batch-size", v, 1, 65536); },
       [](const Options& o) { return std::to_string(o.batch_size); }},
      {"grad-accum-steps", "K", Group::ModelData,
       "gradient accumulation: K micro-batches per optimizer step, all-reduced once after the last (DDP no_sync)",
       [](Options& o, const std::string& v) { o.grad_accum_steps = (int)parse_int("--grad-accum-steps", v, 1, 4096); },
       [](const Options& o) { return std::to_string(o.grad_accum_steps); }},
      {"warmup-steps", "N", Group::ModelData, "untimed steps before the timed window",
       [](Options& o, const std::string& v) { o.warmup_steps = (int)parse_int("--warmup-steps", v, 0, kMaxSteps); },
       [](const Options& o) { return std::to_string(o.warmup_steps); }},
      {"steps", "N", Group::ModelData, "timed steps; the profiler capture range covers exactly them",
       [](Options& o, const std::string& v) { o.steps = (int)parse_int("--steps", v, 1, kMaxSteps); },
       [](const Options& o) { return std::to_string(o.steps); }},
      {"cooldown-steps", "N", Group::ModelData, "untimed steps after the timed window",
       [](Options& o, const std::string& v) { o.cooldown_steps = (int)parse_int("--cooldown-steps", v, 0, kMaxSteps); },
       [](const Options& o) { return std::to_string(o.cooldown_steps); }},
      {"backend", "gpu|cpu|auto", Group::ModelData,
       "gpu: CUDA + NCCL; cpu: the C++ reference + MPI all-reduce (slow: use a small model); auto: gpu when a CUDA "
       "device is visible",
       [](Options& o, const std::string& v) { o.backend = parse_enum<Backend>("--backend", v); },
       [](const Options& o) { return to_string(o.backend); }},
      {"data", "SOURCE", Group::ModelData,
       "synthetic: random images made by host threads (FakeData); device: made on the GPU; idx:DIR: an MNIST-format "
       "data set, resized to the model's input",
       [](Options& o, const std::string& v) { o.data = parse_data(v); },
       [](const Options& o) { return to_string(o.data); }},
      {"eval-every", "N", Group::ModelData,
       "evaluate top-1 accuracy and cross-entropy over --eval-split every N optimizer steps and after the last (eval/* "
       "in the results file); 0 = never; needs --data idx:DIR",
       [](Options& o, const std::string& v) { o.eval_every = (int)parse_int("--eval-every", v, 0, kMaxSteps); },
       [](const Options& o) { return std::to_string(o.eval_every); }},
      {"eval-split", "test|train", Group::ModelData,
       "the split --eval-every evaluates: test = DIR/t10k-*-ubyte[.gz] next to the training files; train = the "
       "training split",
       [](Options& o, const std::string& v) { o.eval_split = parse_enum<EvalSplit>("--eval-split", v); },
       [](const Options& o) { return to_string(o.eval_split); }},
      {"data-workers", "N", Group::ModelData, "host threads that prepare batches ahead of the training loop",
       [](Options& o, const std::string& v) { o.data_workers = (int)parse_int("--data-workers", v, 1, 256); },
       [](const Options& o) { return std::to_string(o.data_workers); }},
      {"bucket-cap-mb", "MB", Group::Ddp, "DDP bucket capacity in MiB (PyTorch bucket_cap_mb)",
       [](Options& o, const std::string& v) { o.bucket_cap_mb = parse_double("--bucket-cap-mb", v, 0, 1e6, true); },
       [](const Options& o) { return fmt(o.bucket_cap_mb); }},
      {"first-bucket-mb", "MB", Group::Ddp,
       "capacity in MiB of the first bucket, which holds the first gradients ready (PyTorch: 1 MiB)",
       [](Options& o, const std::string& v) { o.first_bucket_mb = parse_double("--first-bucket-mb", v, 0, 1e6, true); },
       [](const Options& o) { return fmt(o.first_bucket_mb); }},
      {"no-ddp", nullptr, Group::Ddp,
       "train without any reducer or communication (the single-GPU baseline); 1 rank only",
       [](Options& o, const std::string&) { o.ddp = false; }, [](const Options& o) { return true_false(!o.ddp); }},
      {"no-overlap", nullptr, Group::Ddp, "all-reduce every bucket after backward instead of as soon as it is ready",
       [](Options& o, const std::string&) { o.overlap = false; },
       [](const Options& o) { return true_false(!o.overlap); }},
      {"shard-optimizer", nullptr, Group::Ddp,
       "ZeRO stage 1: reduce-scatter each bucket, update this rank's 1/N shard (its optimizer state alone), all-gather "
       "the parameters; needs --compression none, --grad-as-bucket-view on",
       [](Options& o, const std::string&) { o.shard_optimizer = true; },
       [](const Options& o) { return true_false(o.shard_optimizer); }},
      {"allgather-dtype", "auto|fp32|bf16", Group::Ddp,
       "ZeRO-1: fp32 (DDP's arithmetic), bf16 (half the bytes, fp32 shard masters, Megatron-LM); auto: bf16 iff "
       "--precision bf16, >1 rank",
       [](Options& o, const std::string& v) { o.allgather_dtype = parse_enum<AllGatherDtype>("--allgather-dtype", v); },
       [](const Options& o) { return to_string(o.allgather_dtype); }},
      {"grad-as-bucket-view", "on|off", Group::Ddp,
       "on: gradients are the buckets, all-reduced in place (gradient_as_bucket_view=True); off: a bucket buffer, "
       "copies",
       [](Options& o, const std::string& v) {
         o.grad_as_bucket_view = one_of("--grad-as-bucket-view", v, {"on", "off"}) == "on";
       },
       [](const Options& o) { return on_off(o.grad_as_bucket_view); }},
      {"record-grad-ready", nullptr, Group::Ddp,
       "record when backward finalises each parameter group's gradients (grad_ready/* in the results file; with "
       "--no-ddp too): 6 x layers + 4 CUDA events per step on the compute stream (vit_l_32: 148)",
       [](Options& o, const std::string&) { o.record_grad_ready = true; },
       [](const Options& o) { return true_false(o.record_grad_ready); }},
      {"compression", "none|fp16|bf16|powersgd", Group::Ddp,
       "DDP comm hook: none (fp32 average), fp16 / bf16 (fp16_compress_hook, bf16_compress_hook), powersgd "
       "(powerSGD_hook)",
       [](Options& o, const std::string& v) { o.compression = parse_enum<Compression>("--compression", v); },
       [](const Options& o) { return to_string(o.compression); }},
      {"precision", "fp32|tf32|bf16", Group::Speed,
       "GPU numerics: fp32 = strict fp32; tf32 = GEMMs on TF32 tensor cores; bf16 = mixed precision as "
       "torch.autocast(bfloat16), fp32 master weights and gradients",
       [](Options& o, const std::string& v) { o.precision = parse_enum<Precision>("--precision", v); },
       [](const Options& o) { return to_string(o.precision); }},
      {"fp32-matmul", "ieee|tf32x3", Group::Speed,
       "GPU, --precision fp32: ieee = strict fp32 GEMMs; tf32x3 = each nn.Linear GEMM as three TF32 tensor-core "
       "products on hi/lo operand halves (about fp32's accuracy, faster)",
       [](Options& o, const std::string& v) { o.fp32_matmul = parse_enum<Fp32Matmul>("--fp32-matmul", v); },
       [](const Options& o) { return to_string(o.fp32_matmul); }},
      {"cuda-graph", "on|off", Group::Speed,
       "GPU: on = forward, backward and the bucket all-reduces of a step replayed as one CUDA graph from the second "
       "step (PowerSGD runs eagerly); off = launched each step, with NVTX ranges",
       [](Options& o, const std::string& v) {
         o.cuda_graph = one_of("--cuda-graph", v, {"on", "off"}) == "on";
       },
       [](const Options& o) { return on_off(o.cuda_graph); }},
      {"attention", "auto|cudnn|custom|gemm|gemm-recompute", Group::Speed,
       "GPU attention core: custom (own kernels), cudnn (flash, bf16), gemm (batched cuBLAS, fp32/tf32), "
       "gemm-recompute (less memory)",
       [](Options& o, const std::string& v) { o.attention = parse_enum<AttentionChoice>("--attention", v); },
       [](const Options& o) { return to_string(o.attention); }},
      {"patch-embed", "auto|cudnn|gemm", Group::Speed,
       "GPU patch embedding: gemm = im2col + cuBLASLt GEMM; cudnn = cuDNN convolution (fp32, tf32); auto = gemm "
       "(faster)",
       [](Options& o, const std::string& v) { o.patch_embed = parse_enum<PatchEmbedChoice>("--patch-embed", v); },
       [](const Options& o) { return to_string(o.patch_embed); }},
      {"recompute-gelu", "auto|on|off", Group::Speed,
       "GPU: on = backward recomputes each block's GELU output, not keeping it (same results, less memory); auto = on "
       "in fp32/tf32",
       [](Options& o, const std::string& v) { o.recompute_gelu = parse_enum<RecomputeChoice>("--recompute-gelu", v); },
       [](const Options& o) { return to_string(o.recompute_gelu); }},
      {"powersgd-rank", "R", Group::Ddp, "PowerSGD matrix_approximation_rank",
       [](Options& o, const std::string& v) { o.powersgd_rank = (int)parse_int("--powersgd-rank", v, 1, 1024); },
       [](const Options& o) { return std::to_string(o.powersgd_rank); }},
      {"powersgd-start-step", "N", Group::Ddp,
       "PowerSGD start_powerSGD_iter: plain fp32 all-reduce before this step (PyTorch's 1000 means no compression in a "
       "short run); at least 2 with error feedback or warm start, as PyTorch requires",
       [](Options& o, const std::string& v) {
         o.powersgd_start_step = parse_int("--powersgd-start-step", v, 0, kMaxSteps);
       },
       [](const Options& o) { return std::to_string(o.powersgd_start_step); }},
      {"powersgd-min-compression-rate", "X", Group::Ddp,
       "PowerSGD min_compression_rate: an (n, m) tensor is compressed iff (n + m) * rank * X < n * m",
       [](Options& o, const std::string& v) {
         o.powersgd_min_compression_rate = parse_double("--powersgd-min-compression-rate", v, 0, 1e9, false);
       },
       [](const Options& o) { return fmt(o.powersgd_min_compression_rate); }},
      {"powersgd-no-error-feedback", nullptr, Group::Ddp, "PowerSGD without error feedback (use_error_feedback=False)",
       [](Options& o, const std::string&) { o.powersgd_error_feedback = false; },
       [](const Options& o) { return true_false(!o.powersgd_error_feedback); }},
      {"powersgd-no-warm-start", nullptr, Group::Ddp,
       "PowerSGD without warm start: new random Qs every step (warm_start=False)",
       [](Options& o, const std::string&) { o.powersgd_warm_start = false; },
       [](const Options& o) { return true_false(!o.powersgd_warm_start); }},
      {"gemm-sm-carveout", "N", Group::Speed,
       "GPU: backward's cuBLASLt and cuBLAS GEMMs are planned for (SM count - N) SMs "
       "(CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, cublasSetSmCountTarget), leaving N SMs to a concurrent stream; 0 = "
       "every SM",
       [](Options& o, const std::string& v) { o.gemm_sm_carveout = (int)parse_int("--gemm-sm-carveout", v, 0, 1024); },
       [](const Options& o) { return std::to_string(o.gemm_sm_carveout); }},
      {"gemm-autotune", "N", Group::Speed,
       "GPU: cuBLASLt's first N heuristic candidates for each GEMM shape are timed once before the first step and "
       "the fastest kept; 0 or 1 = the first candidate, untimed (as --checkpoint-every and --resume do)",
       [](Options& o, const std::string& v) { o.gemm_autotune = (int)parse_int("--gemm-autotune", v, 0, 32); },
       [](const Options& o) { return std::to_string(o.gemm_autotune); }},
      {"nccl-max-ctas", "N", Group::Ddp,
       "GPU: cap on the thread blocks (SMs) NCCL's kernels take while they overlap backward (ncclConfig_t maxCTAs); 0 "
       "= NCCL's choice",
       [](Options& o, const std::string& v) { o.nccl_max_ctas = (int)parse_int("--nccl-max-ctas", v, 0, 64); },
       [](const Options& o) { return std::to_string(o.nccl_max_ctas); }},
      {"allreduce", "nccl|copy-engine", Group::Ddp,
       "GPU all-reduce: nccl = ncclAllReduce; copy-engine = peer-to-peer copies (no SM), all ranks on one node, no "
       "PowerSGD",
       [](Options& o, const std::string& v) { o.allreduce = parse_enum<AllReduceImpl>("--allreduce", v); },
       [](const Options& o) { return to_string(o.allreduce); }},
      {"comm-streams", "auto|N", Group::Ddp,
       "--allreduce copy-engine: the comm streams (1 to 4) the buckets alternate over; auto = 2 with --precision bf16 "
       "and --compression none, else 1",
       [](Options& o, const std::string& v) {
         if (v == "auto") {
           o.comm_streams.reset();
           return;
         }
         if (v.size() != 1 || v[0] < '1' || v[0] > '4')
           bad("--comm-streams", "expected auto or an integer in [1, 4], got '" + shown(v) + "'");
         o.comm_streams = v[0] - '0';
       },
       [](const Options& o) { return o.comm_streams ? std::to_string(*o.comm_streams) : std::string("auto"); }},
      {"optimizer", "sgd|adamw", Group::Optimizer,
       "sgd: torch.optim.SGD (--momentum, --weight-decay as L2); adamw: torch.optim.AdamW (--adam-*, decoupled "
       "--weight-decay)",
       [](Options& o, const std::string& v) { o.optimizer = parse_enum<OptimizerKind>("--optimizer", v); },
       [](const Options& o) { return to_string(o.optimizer); }},
      {"lr", "X", Group::Optimizer, "learning rate; with a schedule, its value after the warm-up (the peak)",
       [](Options& o, const std::string& v) { o.lr = parse_double("--lr", v, 0, 1e6, false); },
       [](const Options& o) { return fmt(o.lr); }},
      {"momentum", "X", Group::Optimizer, "SGD momentum (torch.optim.SGD); SGD only",
       [](Options& o, const std::string& v) { o.momentum = parse_double("--momentum", v, 0, 1, false); },
       [](const Options& o) { return fmt(o.momentum); }},
      {"weight-decay", "X", Group::Optimizer,
       "SGD: L2 added to the gradient; AdamW: decoupled, p *= 1 - lr * wd (torch.optim.AdamW's default is 0.01, ours "
       "0)",
       [](Options& o, const std::string& v) { o.weight_decay = parse_double("--weight-decay", v, 0, 1e3, false); },
       [](const Options& o) { return fmt(o.weight_decay); }},
      {"optimizer-in-backward", nullptr, Group::Optimizer,
       "GPU, --no-ddp, plain SGD: the block weights' step in backward's weight-gradient GEMMs (W -= lr * "
       "dW); a non-finite step is applied before it is seen: the run stops, no weights written",
       [](Options& o, const std::string&) { o.optimizer_in_backward = true; },
       [](const Options& o) { return true_false(o.optimizer_in_backward); }},
      {"adam-beta1", "X", Group::Optimizer, "AdamW betas[0], the first-moment decay (torch default)",
       [](Options& o, const std::string& v) { o.adam_beta1 = parse_beta("--adam-beta1", v); },
       [](const Options& o) { return fmt(o.adam_beta1); }},
      {"adam-beta2", "X", Group::Optimizer, "AdamW betas[1], the second-moment decay (torch default)",
       [](Options& o, const std::string& v) { o.adam_beta2 = parse_beta("--adam-beta2", v); },
       [](const Options& o) { return fmt(o.adam_beta2); }},
      {"adam-eps", "X", Group::Optimizer, "AdamW eps, added to the denominator (torch default)",
       [](Options& o, const std::string& v) { o.adam_eps = parse_double("--adam-eps", v, 0, 1, true); },
       [](const Options& o) { return fmt(o.adam_eps); }},
      {"lr-schedule", "constant|cosine", Group::Optimizer,
       "constant = --lr after the linear warm-up; cosine = warm-up, then half a cosine down to --min-lr (transformers' "
       "schedule)",
       [](Options& o, const std::string& v) { o.lr_schedule = parse_enum<LrScheduleKind>("--lr-schedule", v); },
       [](const Options& o) { return to_string(o.lr_schedule); }},
      {"lr-warmup-steps", "N", Group::Optimizer,
       "linear learning-rate warm-up from 0 over N optimizer steps; 0 = none (not the timing window's --warmup-steps)",
       [](Options& o, const std::string& v) { o.lr_warmup_steps = parse_int("--lr-warmup-steps", v, 0, kMaxSteps); },
       [](const Options& o) { return std::to_string(o.lr_warmup_steps); }},
      {"lr-decay-steps", "N", Group::Optimizer,
       "cosine: the optimizer step at which the rate reaches --min-lr; 0 = the run's total steps",
       [](Options& o, const std::string& v) { o.lr_decay_steps = parse_int("--lr-decay-steps", v, 0, kMaxSteps); },
       [](const Options& o) { return std::to_string(o.lr_decay_steps); }},
      {"min-lr", "X", Group::Optimizer, "cosine: the learning rate at the end of the decay, <= --lr",
       [](Options& o, const std::string& v) { o.min_lr = parse_double("--min-lr", v, 0, 1e6, false); },
       [](const Options& o) { return fmt(o.min_lr); }},
      {"seed", "N", Group::ModelData, "seed of parameter initialisation and synthetic data (the same on every rank)",
       [](Options& o, const std::string& v) { o.seed = (uint64_t)parse_int("--seed", v, 0, (1ll << 62)); },
       [](const Options& o) { return std::to_string(o.seed); }},
      {"init", "torchvision|random", Group::ModelData,
       "parameter initialisation: torchvision's (zero head) or random everywhere",
       [](Options& o, const std::string& v) { o.init = parse_enum<InitScheme>("--init", v); },
       [](const Options& o) { return to_string(o.init); }},
      {"init-from", "FILE", Group::ModelData,
       "start from the parameters of this HDF5 weights file (/params/<torchvision name>, as --save-weights writes) "
       "instead of --init",
       set_path("init-from", &Options::init_from), [](const Options& o) { return o.init_from; }},
      {"save-weights", "FILE", Group::Outputs,
       "rank 0 writes the final parameters to this HDF5 file under torchvision's names; never overwritten unless "
       "--overwrite",
       set_path("save-weights", &Options::save_weights), [](const Options& o) { return o.save_weights; }},
      {"checkpoint-every", "N", Group::Reliability,
       "rank 0 writes a checkpoint every N optimizer steps, at the end and on SIGTERM/SIGINT (then the GPU runs "
       "deterministically, about 2% slower); 0 = never",
       [](Options& o, const std::string& v) {
         o.checkpoint_every = (int)parse_int("--checkpoint-every", v, 0, kMaxSteps);
       },
       [](const Options& o) { return std::to_string(o.checkpoint_every); }},
      {"checkpoint-path", "PATH", Group::Reliability,
       "checkpoint file; '{step}' in it is replaced by the step (one file each), else each replaces the last (default: "
       "--out with .h5 -> .ckpt.h5)",
       set_path("checkpoint-path", &Options::checkpoint_path), [](const Options& o) { return o.checkpoint_path; }},
      {"resume", "FILE", Group::Reliability,
       "continue the run of this checkpoint (its next step S) up to this run's total steps, counted from step 0 of the "
       "original run; model, ranks, batch, data and optimizer must match",
       set_path("resume", &Options::resume), [](const Options& o) { return o.resume; }},
      {"out", "FILE", Group::Outputs,
       "HDF5 results file written by rank 0 (default: vitddp-<model>-np<ranks>-<time>.h5); never overwritten unless "
       "--overwrite",
       set_path("out", &Options::out), [](const Options& o) { return o.out; }},
      {"trace", "FILE.json", Group::Outputs,
       "also write the timeline as a Chrome trace-event file (a process per rank, a thread per stream) for Perfetto",
       set_path("trace", &Options::trace), [](const Options& o) { return o.trace; }},
      {"overwrite", nullptr, Group::Outputs,
       "allow replacing existing outputs (--out, --trace, --save-weights, checkpoints); never an input",
       [](Options& o, const std::string&) { o.overwrite = true; },
       [](const Options& o) { return true_false(o.overwrite); }},
      {"progress-every", "N|auto", Group::Outputs,
       "rank 0 prints a progress line every N steps and after the last; auto: after the first, about every 5 s and "
       "after the last",
       [](Options& o, const std::string& v) {
         o.progress_every = v == "auto" ? 0 : (int)parse_int("--progress-every", v, 1, kMaxSteps);
       },
       [](const Options& o) { return o.progress_every == 0 ? std::string("auto") : std::to_string(o.progress_every); }},
      {"flush-every", "N", Group::Outputs, "flush the results file every N steps (a killed run keeps what was flushed)",
       [](Options& o, const std::string& v) { o.flush_every = (int)parse_int("--flush-every", v, 1, kMaxSteps); },
       [](const Options& o) { return std::to_string(o.flush_every); }},
      {"on-nonfinite", "stop|skip", Group::Reliability,
       "a step whose loss or averaged gradients hold NaN/Inf is never applied; then stop (exit code 4) or skip it and "
       "go on",
       [](Options& o, const std::string& v) { o.on_nonfinite = parse_enum<NonfinitePolicy>("--on-nonfinite", v); },
       [](const Options& o) { return to_string(o.on_nonfinite); }},
      {"step-timeout", "SECONDS", Group::Reliability,
       "watchdog: a step not finished after this long (a peer died or hangs) ends the rank with exit code 3, and "
       "mpirun the job",
       [](Options& o, const std::string& v) { o.step_timeout_s = parse_double("--step-timeout", v, 0, 1e7, true); },
       [](const Options& o) { return fmt(o.step_timeout_s); }},
      {"debug-nan-at-step", "N", Group::Debug,
       "rank 0's batch of step N gets a NaN pixel (-1: off); steps are numbered from 0 everywhere",
       [](Options& o, const std::string& v) {
         o.debug_nan_at_step = (int)parse_int("--debug-nan-at-step", v, -1, kMaxSteps);
       },
       [](const Options& o) { return std::to_string(o.debug_nan_at_step); }},
      {"debug-fail-at-step", "N", Group::Debug,
       "rank --debug-fail-rank fails inside step N (0-based, as every step number), while its peers are in the step's "
       "collectives (-1: off)",
       [](Options& o, const std::string& v) {
         o.debug_fail_at_step = (int)parse_int("--debug-fail-at-step", v, -1, kMaxSteps);
       },
       [](const Options& o) { return std::to_string(o.debug_fail_at_step); }},
      {"debug-fail-rank", "R", Group::Debug, "the rank that fails (--debug-fail-at-step)",
       [](Options& o, const std::string& v) { o.debug_fail_rank = (int)parse_int("--debug-fail-rank", v, 0, 1000000); },
       [](const Options& o) { return std::to_string(o.debug_fail_rank); }},
      {"debug-fail-mode", "throw|exit|nccl-abort", Group::Debug,
       "how it fails: throw (error path, MPI_Abort), exit (status 1 at once), nccl-abort (GPU: ncclCommAbort mid-step)",
       [](Options& o, const std::string& v) { o.debug_fail_mode = parse_enum<FailMode>("--debug-fail-mode", v); },
       [](const Options& o) { return to_string(o.debug_fail_mode); }},
      {"dry-run", nullptr, Group::Outputs,
       "make the checks a run makes before training (options, inputs, --resume, outputs: the same message and exit 2), "
       "write no file, print the memory one rank needs, item by item, exit 0; needs no GPU",
       [](Options& o, const std::string&) { o.dry_run = true; },
       [](const Options& o) { return true_false(o.dry_run); }},
      {"debug-crash-in-checkpoint", nullptr, Group::Debug,
       "rank 0 kills itself (SIGKILL) after writing the first checkpoint's .tmp file, before the rename",
       [](Options& o, const std::string&) { o.debug_crash_in_checkpoint = true; },
       [](const Options& o) { return true_false(o.debug_crash_in_checkpoint); }},
      {"help", nullptr, Group::Outputs, "print this help and exit",
       [](Options& o, const std::string&) { o.help = true; }, [](const Options&) { return std::string("false"); }},
      {"version", nullptr, Group::Outputs, "print the versions of vitddp and of the libraries it runs on, and exit",
       [](Options& o, const std::string&) { o.version = true; }, [](const Options&) { return std::string("false"); }},
  };
  return specs;
}

const Spec* find_spec(const std::string& name) {
  for (const auto& s : table())
    if (name == s.name) return &s;
  return nullptr;
}

/// Optimal-string-alignment distance (Damerau-Levenshtein with adjacent transpositions, each
/// substring edited once): the edits from a to b.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

/// The option name nearest to the unknown `name` (without "--"): the closest within 3 edits (at
/// most one edit per 3 letters of `name`, so that short names do not match everything), else the
/// first option that `name` is a prefix of; "" when none is near.
std::string nearest_option(const std::string& name) {
  std::string best;
  const size_t limit = std::min<size_t>(3, std::max<size_t>(1, name.size() / 3));
  size_t best_d = limit + 1;
  for (const auto& s : table()) {
    const size_t d = edit_distance(name, s.name);
    if (d < best_d) {
      best_d = d;
      best = s.name;
    }
  }
  if (!best.empty() || name.empty()) return best;
  for (const auto& s : table())
    if (std::string(s.name).rfind(name, 0) == 0) return s.name;
  return "";
}

/// --attention / --patch-embed against --precision (the choices model/kernel_choice.h can run).
void check_kernel_choices(const Options& o) {
  const std::string a =
      attention_choice_error(to_string(o.attention), o.precision, vit_config(o.model).head_dim(), o.model);
  if (!a.empty()) throw OptionError(a);
  const std::string p = patch_embed_choice_error(to_string(o.patch_embed), o.precision);
  if (!p.empty()) throw OptionError(p);
}

/// --lr-schedule cosine against --lr, --min-lr, --lr-warmup-steps and --lr-decay-steps.
void check_schedule(const Options& o) {
  if (o.lr_schedule != LrScheduleKind::WarmupCosine) return;
  if (o.min_lr > o.lr) bad("--min-lr", "must not exceed --lr (" + fmt(o.min_lr) + " > " + fmt(o.lr) + ")");
  const int64_t decay = o.lr_decay_steps > 0 ? o.lr_decay_steps : o.total_steps();
  if (decay <= o.lr_warmup_steps)
    bad("--lr-warmup-steps", "must be less than the cosine schedule's length " + std::to_string(decay) +
                                 (o.lr_decay_steps > 0 ? " (--lr-decay-steps)" : " (the run's total steps; see --lr-decay-steps)") +
                                 ", got " + std::to_string(o.lr_warmup_steps));
}

/// --shard-optimizer (ZeRO-1) against the options its reduce-scatter and all-gather cannot serve.
void check_shard_optimizer(const Options& o) {
  if (!o.shard_optimizer || !o.ddp) return;  // with --no-ddp the no-effect rule refuses it
  if (o.compression == Compression::PowerSgd)
    bad("--compression", "powersgd: not with --shard-optimizer (PowerSGD all-reduces the low-rank factors P and Q of "
                         "whole gradient matrices; a reduce-scatter leaves each rank only its shard of the gradients)");
  if (o.compression != Compression::None)
    bad("--compression", to_string(o.compression) + ": not with --shard-optimizer (its reduce-scatter averages fp32 "
                         "buckets; a 16-bit reduce-scatter is not implemented): use --compression none");
  if (!o.grad_as_bucket_view)
    bad("--grad-as-bucket-view", "off: not with --shard-optimizer (the reduce-scatter writes each rank's shard of the "
                                 "averaged gradients to a buffer of its own: there is no averaged bucket to copy back)");
}

/// --allgather-dtype bf16: what the bf16 all-gather needs (auto and fp32 need nothing; without
/// --shard-optimizer the no-effect rule refuses them).
void check_allgather_dtype(const Options& o) {
  if (o.allgather_dtype != AllGatherDtype::Bf16 || !o.ddp) return;  // with --no-ddp the no-effect rule refuses it
  if (o.backend == Backend::Cpu)
    bad("--allgather-dtype", "bf16: not with --backend cpu (the CPU backend computes and gathers in fp32 only)");
  if (!o.shard_optimizer)
    bad("--allgather-dtype", "bf16: needs --shard-optimizer (only ZeRO-1 all-gathers the parameters; DDP all-reduces "
                             "the gradients and every replica updates its own fp32 parameters)");
  if (o.precision != Precision::bf16)
    bad("--allgather-dtype", "bf16: needs --precision bf16 (the gathered bf16 copy is what the bf16 model reads; "
                             "with --precision " + to_string(o.precision) + " the model reads fp32 parameters)");
}

/// --optimizer-in-backward against what a step applied inside backward cannot do.
void check_optimizer_in_backward(const Options& o) {
  if (!o.optimizer_in_backward) return;
  if (o.backend == Backend::Cpu)
    bad("--optimizer-in-backward", "needs the GPU backend (cuBLASLt's weight-gradient GEMMs apply the step)");
  if (o.ddp)
    bad("--optimizer-in-backward",
        "needs --no-ddp (it applies each weight's own gradient as backward computes it; "
        "DDP must average the gradients across the ranks first)");
  if (o.optimizer != OptimizerKind::Sgd)
    bad("--optimizer-in-backward",
        "needs --optimizer sgd (the step is the weight-gradient GEMM's epilogue, "
        "W = W - lr * dW; AdamW's moments do not fit it)");
  if (o.weight_decay != 0)
    bad("--weight-decay", fmt(o.weight_decay) +
                              ": not with --optimizer-in-backward (the GEMM would decay W through beta = 1 - lr * "
                              "weight_decay in fp32, whose spacing near 1 is 6e-8: small products would be lost)");
  if (o.momentum != 0)
    bad("--momentum", fmt(o.momentum) +
                          ": not with --optimizer-in-backward (the GEMM that applies the step keeps no "
                          "momentum buffer); use --momentum 0");
  if (o.grad_accum_steps > 1)
    bad("--grad-accum-steps", std::to_string(o.grad_accum_steps) +
                                  ": not with --optimizer-in-backward (every backward applies a step); use 1");
  if (o.fp32_matmul == Fp32Matmul::Tf32x3)
    bad("--fp32-matmul",
        "tf32x3: not with --optimizer-in-backward (the weight-gradient GEMM that applies the step "
        "reads lr from the device, which the three TF32 GEMMs of one product would each need)");
  if (o.on_nonfinite == NonfinitePolicy::Skip)
    bad("--on-nonfinite",
        "skip: not with --optimizer-in-backward (the step is applied inside backward, before its "
        "gradients are known to be finite, so it cannot be skipped); use --on-nonfinite stop");
}

/// Combinations that cannot work together (as opposed to options without effect).
void check_combinations(const Options& o) {
  // assign_buckets works in bytes: a limit below one byte would be 0.
  if (bucket_limit_bytes(o.bucket_cap_mb) == 0)
    bad("--bucket-cap-mb", "below one byte (" + fmt(o.bucket_cap_mb) + " MiB); a bucket holds at least one tensor");
  if (bucket_limit_bytes(o.first_bucket_mb) == 0)
    bad("--first-bucket-mb", "below one byte (" + fmt(o.first_bucket_mb) + " MiB); a bucket holds at least one tensor");
  if (o.first_bucket_mb > o.bucket_cap_mb)
    bad("--first-bucket-mb", "must not exceed --bucket-cap-mb (" + fmt(o.first_bucket_mb) + " > " + fmt(o.bucket_cap_mb) + ")");
  if (o.compression == Compression::PowerSgd && (o.checkpoint_every > 0 || !o.resume.empty()))
    bad("--compression", "powersgd: checkpoints do not hold PowerSGD's state (error feedback, warm-start Q, step "
                         "counter), so --checkpoint-every and --resume are not supported with it");
  if (!o.resume.empty() && !o.init_from.empty())
    bad("--init-from", "cannot be combined with --resume (the checkpoint holds the parameters)");
  // PyTorch's PowerSGDState raises the same: the first two steps of DDP build the buckets, and the
  // error-feedback and warm-start state are sized by them (powerSGD_hook.py, PowerSGDState.__init__).
  if (o.compression == Compression::PowerSgd && o.powersgd_start_step <= 1 &&
      (o.powersgd_error_feedback || o.powersgd_warm_start))
    bad("--powersgd-start-step", std::to_string(o.powersgd_start_step) +
                                     ": must be at least 2 with error feedback or warm start, as PyTorch's "
                                     "start_powerSGD_iter (add --powersgd-no-error-feedback --powersgd-no-warm-start "
                                     "to compress from step 0)");
  if (o.allreduce == AllReduceImpl::CopyEngine && o.compression == Compression::PowerSgd)
    bad("--allreduce", "copy-engine: not with --compression powersgd (its all-reduces of P and Q use NCCL)");
  check_shard_optimizer(o);
  check_allgather_dtype(o);
  check_optimizer_in_backward(o);
  if (o.eval_every > 0 && o.data.kind != DataSpec::Kind::idx)
    throw OptionError("--eval-every: --data " + to_string(o.data) + " has no --eval-split " + to_string(o.eval_split) +
                      " to evaluate; use --data idx:DIR (an MNIST-format data set with its t10k test files)");
  if (o.debug_fail_at_step >= 0 && o.debug_fail_mode == FailMode::NcclAbort) {
    if (o.backend == Backend::Cpu || !o.ddp)
      throw OptionError("--debug-fail-mode nccl-abort: needs the GPU backend with DDP (an NCCL communicator)");
    if (o.allreduce != AllReduceImpl::Nccl)
      throw OptionError("--debug-fail-mode nccl-abort: with --allreduce " + to_string(o.allreduce) +
                        " the gradients do not go through NCCL, so aborting the communicator tests nothing");
  }
}

/// One row of the no-effect table: option `option`, when given, must have an effect, i.e.
/// `applies` must hold; otherwise it is refused with "--option[ value]: why_not".
struct EffectRule {
  const char* option;                                  ///< without "--"
  std::function<bool(const Options&)> applies;         ///< true when the option has an effect
  std::function<std::string(const Options&)> why_not;  ///< the reason, after "--option: "
  bool name_value = false;                             ///< the refusal names the value ("--precision bf16: ...")
};

std::function<std::string(const Options&)> because(const char* text) {
  return [text](const Options&) { return std::string(text); };
}

/// Every option that applies only in some configurations, with the condition. Rows of one option
/// are checked in order (the first that fails is reported). Backend rows hold while the backend
/// is auto (validate_options runs again once main resolved it).
const std::vector<EffectRule>& effect_rules() {
  const auto ddp = [](const Options& o) { return o.ddp; };
  const auto no_ddp = because("has no effect with --no-ddp (one replica, no reducer)");
  const auto powersgd = [](const Options& o) { return o.compression == Compression::PowerSgd; };
  const auto no_powersgd = because("has no effect without --compression powersgd");
  const auto sgd = [](const Options& o) { return o.optimizer == OptimizerKind::Sgd; };
  const auto adamw = [](const Options& o) { return o.optimizer == OptimizerKind::AdamW; };
  const auto cosine = [](const Options& o) { return o.lr_schedule == LrScheduleKind::WarmupCosine; };
  const auto not_cpu = [](const Options& o) { return o.backend != Backend::Cpu; };
  const auto checkpoints = [](const Options& o) { return o.checkpoint_every > 0; };
  const auto failing = [](const Options& o) { return o.debug_fail_at_step >= 0; };
  const auto past_last_step = [](const Options& o) {
    return "has no effect: the run's last step is " + std::to_string(o.total_steps() - 1) + " (--warmup-steps " +
           std::to_string(o.warmup_steps) + " + --steps " + std::to_string(o.steps) + " + --cooldown-steps " +
           std::to_string(o.cooldown_steps) + ", numbered from 0)";
  };
  static const std::vector<EffectRule> rules = {
      {"eval-split", [](const Options& o) { return o.eval_every > 0; },
       because("has no effect without --eval-every N (N > 0)")},
      {"data-workers", [](const Options& o) { return o.data.kind != DataSpec::Kind::device; },
       because("has no effect with --data device (the GPU makes the batches)")},
      {"data", [](const Options& o) { return o.backend != Backend::Cpu || o.data.kind != DataSpec::Kind::device; },
       because("needs the GPU backend"), true},
      {"init", [](const Options& o) { return o.init_from.empty(); },
       because("has no effect with --init-from (the parameters come from that file)")},
      {"debug-nan-at-step", [](const Options& o) { return o.debug_nan_at_step < o.total_steps(); }, past_last_step,
       true},
      {"debug-fail-at-step", [](const Options& o) { return o.debug_fail_at_step < o.total_steps(); }, past_last_step,
       true},
      {"bucket-cap-mb", ddp, no_ddp},
      {"first-bucket-mb", ddp, no_ddp},
      {"no-overlap", ddp, no_ddp},
      {"shard-optimizer", ddp, no_ddp},
      {"allgather-dtype", ddp, no_ddp},
      {"allgather-dtype", [](const Options& o) { return o.shard_optimizer; },
       because("has no effect without --shard-optimizer (DDP all-reduces the gradients and gathers no parameters)")},
      {"grad-as-bucket-view", ddp, no_ddp},
      {"compression", ddp, no_ddp},
      {"powersgd-rank", ddp, no_ddp},
      {"powersgd-rank", powersgd, no_powersgd},
      {"powersgd-start-step", ddp, no_ddp},
      {"powersgd-start-step", powersgd, no_powersgd},
      {"powersgd-min-compression-rate", ddp, no_ddp},
      {"powersgd-min-compression-rate", powersgd, no_powersgd},
      {"powersgd-no-error-feedback", ddp, no_ddp},
      {"powersgd-no-error-feedback", powersgd, no_powersgd},
      {"powersgd-no-warm-start", ddp, no_ddp},
      {"powersgd-no-warm-start", powersgd, no_powersgd},
      {"allreduce", ddp, no_ddp},
      {"allreduce", not_cpu, because("needs the GPU backend (the CPU backend all-reduces with MPI)"), true},
      {"comm-streams", ddp, no_ddp},
      {"comm-streams", [](const Options& o) { return o.allreduce == AllReduceImpl::CopyEngine; },
       because("has no effect with --allreduce nccl (it sets the copy engine's comm streams; NCCL's calls on one "
               "communicator run in order)")},
      {"nccl-max-ctas", ddp, no_ddp},
      {"nccl-max-ctas", not_cpu, because("needs the GPU backend (NCCL)")},
      {"precision", [](const Options& o) { return o.backend != Backend::Cpu || o.precision == Precision::fp32; },
       because("needs the GPU backend (the CPU backend computes in fp32 only)"), true},
      {"cuda-graph", not_cpu, because("needs the GPU backend (the CPU backend has no CUDA graph)"), true},
      {"attention", not_cpu, because("needs the GPU backend (the CPU backend has one attention implementation)"), true},
      {"patch-embed", not_cpu, because("needs the GPU backend (the CPU backend has one patch embedding)"), true},
      {"recompute-gelu", not_cpu, because("needs the GPU backend (the CPU backend keeps every activation)"), true},
      {"fp32-matmul", not_cpu, because("needs the GPU backend (the CPU backend's GEMMs are plain fp32 loops)"), true},
      {"fp32-matmul", [](const Options& o) { return o.precision == Precision::fp32; },
       [](const Options& o) {
         return "has no effect with --precision " + to_string(o.precision) +
                " (its GEMMs already run on tensor cores; the option sets how fp32 runs them)";
       },
       true},
      {"gemm-sm-carveout", not_cpu, because("needs the GPU backend (cuBLASLt)")},
      {"gemm-autotune", not_cpu, because("needs the GPU backend (cuBLASLt)")},
      {"gemm-autotune", [](const Options& o) { return o.checkpoint_every == 0 && o.resume.empty(); },
       because("has no effect with --checkpoint-every or --resume (they take cuBLASLt's first heuristic choice, so "
               "that a resumed run repeats the same bits)")},
      {"momentum", sgd,
       because("has no effect with --optimizer adamw (SGD only; AdamW's first-moment decay is --adam-beta1)")},
      {"adam-beta1", adamw, because("has no effect with --optimizer sgd (AdamW only)")},
      {"adam-beta2", adamw, because("has no effect with --optimizer sgd (AdamW only)")},
      {"adam-eps", adamw, because("has no effect with --optimizer sgd (AdamW only)")},
      {"min-lr", cosine, because("has no effect with --lr-schedule constant (cosine only)")},
      {"lr-decay-steps", cosine, because("has no effect with --lr-schedule constant (cosine only)")},
      {"checkpoint-path", checkpoints, because("has no effect without --checkpoint-every N (N > 0)")},
      {"debug-crash-in-checkpoint", checkpoints, because("has no effect without --checkpoint-every N (N > 0)")},
      {"debug-fail-rank", failing, because("has no effect without --debug-fail-at-step N (N >= 0)")},
      {"debug-fail-mode", failing, because("has no effect without --debug-fail-at-step N (N >= 0)")},
  };
  return rules;
}

/// The no-effect rule: every given option with a failing row of effect_rules() is refused.
void check_effects(const Options& o) {
  for (const auto& r : effect_rules()) {
    if (!o.was_given(r.option) || r.applies(o)) continue;
    std::string head = std::string("--") + r.option;
    if (r.name_value) head += " " + find_spec(r.option)->get(o);
    throw OptionError(head + ": " + r.why_not(o));
  }
}

}  // namespace

void validate_options(const Options& o) {
  check_kernel_choices(o);
  check_schedule(o);
  check_combinations(o);
  check_effects(o);
}

Options parse_options(int argc, const char* const* argv) {
  Options o;
  // --help anywhere wins over every other argument, however malformed (no option takes a value
  // that starts with "--", so it cannot be one), then --version the same way.
  for (const char* flag : {"help", "version"})
    for (int i = 1; i < argc; ++i)
      if (argv[i] == "--" + std::string(flag)) {
        (std::string(flag) == "help" ? o.help : o.version) = true;
        o.given.insert(flag);
        return o;
      }
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) throw OptionError(shown(arg) + ": unexpected argument (options start with --; see --help)");
    std::string name = arg.substr(2), value;
    const size_t eq = name.find('=');
    const bool has_eq = eq != std::string::npos;
    if (has_eq) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    const Spec* spec = find_spec(name);
    if (!spec) {
      const std::string near = nearest_option(name);
      throw OptionError("unknown option '--" + shown(name) + "'" + (near.empty() ? "" : " (did you mean --" + near + "?)"));
    }
    if (o.was_given(name)) bad("--" + name, "given twice");
    if (spec->metavar) {
      if (!has_eq) {
        if (i + 1 >= argc) bad("--" + name, std::string("missing value ") + spec->metavar);
        value = argv[++i];
        if (value.rfind("--", 0) == 0) bad("--" + name, "expects a value, got the option '" + shown(value) + "'");
      }
    } else if (has_eq) {
      bad("--" + name, "takes no value");
    }
    spec->set(o, value);
    o.given.insert(name);
  }
  if (!o.help && !o.version) validate_options(o);
  return o;
}

std::string help_text() {
  std::ostringstream s;
  s << "vitddp: data-parallel Vision Transformer training (MPI + NCCL), timings in HDF5.\n\n"
       "Usage: mpirun -np <ranks> vitddp [options]     (one MPI rank per GPU; vitddp --help | --version)\n"
       "Each step: get batch -> forward -> backward with bucketed all-reduce overlapped on a separate stream ->\n"
       "optimizer step. Every phase and bucket is timed and written by rank 0 to the results file\n"
       "(docs/schema.md). An option that has no effect in the given configuration is refused.\n";
  const Options d;
  for (const Group g : {Group::ModelData, Group::Ddp, Group::Speed, Group::Optimizer, Group::Outputs,
                        Group::Reliability, Group::Debug}) {
    s << "\n" << group_title(g) << " (default in brackets):\n";
    for (const auto& sp : table()) {
      if (sp.group != g) continue;
      std::string head = std::string("  --") + sp.name + (sp.metavar ? std::string(" ") + sp.metavar : "");
      std::string text = sp.help;
      const std::string def = sp.get(d);
      // An empty default is either derived from other options (the help says "default: ...") or off.
      const std::string shown = !def.empty() ? def : text.find("default:") != std::string::npos ? "auto" : "none";
      if (sp.metavar) text += " [" + shown + "]";
      // Help text wrapped at 100 columns, indented under the option's column.
      constexpr size_t kIndent = 30, kWidth = 100;
      s << head;
      size_t col = head.size();
      if (col >= kIndent) {
        s << "\n";
        col = 0;
      }
      s << std::string(kIndent - col, ' ');
      col = kIndent;
      std::istringstream words(text);
      std::string word;
      bool first = true;
      while (words >> word) {
        if (!first && col + 1 + word.size() > kWidth) {
          s << "\n" << std::string(kIndent, ' ');
          col = kIndent;
        } else if (!first) {
          s << ' ';
          ++col;
        }
        s << word;
        col += word.size();
        first = false;
      }
      s << "\n";
    }
  }
  s << "\nExamples:\n"
       "  mpirun -np 2 vitddp --out run.h5                       # ViT-L/32, batch 32, fp32, 25 MiB buckets\n"
       "  mpirun -np 1 vitddp --no-ddp --out single.h5           # the single-GPU baseline\n"
       "  mpirun -np 2 vitddp --backend cpu --model vit_tiny     # CPU reference backend, small model\n"
       "  mpirun -np 2 vitddp --data idx:/usr/share/datasets/fashion-mnist --model vit_tiny --steps 500 --eval-every 100\n"
       "  mpirun -np 2 vitddp --optimizer adamw --weight-decay 0.01 --lr-schedule cosine --lr-warmup-steps 100\n"
       "  mpirun -np 2 vitddp --steps 1000 --checkpoint-every 100 --out run.h5      # checkpoints in run.ckpt.h5\n"
       "  mpirun -np 2 vitddp --steps 1000 --resume run.ckpt.h5 --out run2.h5        # the same run, from the checkpoint on\n"
       "Environment: NCCL_DEBUG=INFO shows NCCL's transport; keep NCCL_NVLS_ENABLE=0 on shared machines.\n";
  return s.str();
}

std::vector<std::pair<std::string, std::string>> option_values(const Options& o) {
  std::vector<std::pair<std::string, std::string>> v;
  for (const auto& sp : table())
    if (std::string(sp.name) != "help" && std::string(sp.name) != "version") v.emplace_back(sp.name, sp.get(o));
  return v;
}

bool allgather_in_bf16(const Options& o, int world_size) {
  if (!o.shard_optimizer || !o.ddp) return false;
  if (o.allgather_dtype == AllGatherDtype::Auto)
    return o.precision == Precision::bf16 && o.backend != Backend::Cpu && world_size > 1;
  return o.allgather_dtype == AllGatherDtype::Bf16;
}

std::vector<Bucket> run_buckets(const Options& o, const ParamLayout& layout) {
  return assign_buckets(layout, bucket_limit_bytes(o.first_bucket_mb), bucket_limit_bytes(o.bucket_cap_mb));
}

ReducerOptions reducer_options(const Options& o) {
  ReducerOptions r;
  r.overlap = o.overlap;
  r.grad_as_bucket_view = o.grad_as_bucket_view;
  r.shard_optimizer = o.shard_optimizer && o.ddp;
  r.compression = to_string(o.compression);  // a name of mpi/hooks/registry.cpp
  r.allreduce = to_string(o.allreduce);      // a name of mpi/transports/gpu_registry_gpu.cpp
  if (o.comm_streams) r.comm_streams = *o.comm_streams;
  else r.comm_streams = o.allreduce == AllReduceImpl::CopyEngine && o.precision == Precision::bf16 && o.compression == Compression::None ? 2 : 1;
  r.powersgd.rank = o.powersgd_rank;
  r.powersgd.start_iter = o.powersgd_start_step;
  r.powersgd.min_compression_rate = o.powersgd_min_compression_rate;
  r.powersgd.error_feedback = o.powersgd_error_feedback;
  r.powersgd.warm_start = o.powersgd_warm_start;
  r.powersgd.seed = o.seed;
  return r;
}

std::string powersgd_start_warning(const Options& o) {
  return powersgd_never_compresses_warning(reducer_options(o), o.total_steps());
}

}  // namespace vitddp
