#include "src/options.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <sstream>

#include "model/kernel_choice.h"
#include "model/precision.h"
#include "model/vit_config.h"

namespace vitddp {
namespace {

[[noreturn]] void bad(const std::string& opt, const std::string& why) {
  throw OptionError(opt + ": " + why);
}

long long parse_int(const std::string& opt, const std::string& v, long long lo, long long hi) {
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0')
    bad(opt, "expected an integer, got '" + v + "'");
  if (errno == ERANGE || x < lo || x > hi)
    bad(opt, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" + v + "'");
  return x;
}

double parse_double(const std::string& opt, const std::string& v, double lo, double hi, bool lo_open) {
  errno = 0;
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(x))
    bad(opt, "expected a finite number, got '" + v + "'");
  if ((lo_open ? x <= lo : x < lo) || x > hi) {
    std::ostringstream s;
    s << "must be in " << (lo_open ? "(" : "[") << lo << ", " << hi << "], got '" << v << "'";
    bad(opt, s.str());
  }
  return x;
}

/// An AdamW beta: a number in [0, 1) (torch.optim.AdamW's check).
double parse_beta(const std::string& opt, const std::string& v) {
  const double x = parse_double(opt, v, 0, 1, false);
  if (x >= 1) bad(opt, "must be in [0, 1), got '" + v + "'");
  return x;
}

std::string fmt(double x) {
  std::ostringstream s;
  s << x;
  return s.str();
}

std::string one_of(const std::string& opt, const std::string& v, const std::vector<std::string>& ok) {
  for (const auto& k : ok)
    if (v == k) return v;
  std::string list;
  for (const auto& k : ok) list += (list.empty() ? "" : ", ") + k;
  bad(opt, "unknown value '" + v + "' (choose one of: " + list + ")");
}

/// One row of the option table.
struct Spec {
  const char* name;      ///< without the leading "--"
  const char* metavar;   ///< nullptr: a flag without value
  const char* help;
  std::function<void(Options&, const std::string&)> set;
  std::function<std::string(const Options&)> get;
};

constexpr long long kMaxSteps = 100000000;

const std::vector<Spec>& table() {
  static const std::vector<Spec> specs = {
      {"model", "NAME", "ViT variant: vit_l_32, vit_b_32, vit_l_16, vit_b_16, vit_h_14 (torchvision sizes), the test sizes vit_tiny, vit_micro, or vit_fmnist, vit_fmnist_cpu (28x28 Fashion-MNIST, model/vit_config.h)",
       [](Options& o, const std::string& v) { o.model = one_of("--model", v, vit_variant_names()); },
       [](const Options& o) { return o.model; }},
      {"num-classes", "K", "classes of the head; 0 = the variant's own (1000; vit_tiny 10)",
       [](Options& o, const std::string& v) {
         o.num_classes = (int)parse_int("--num-classes", v, 0, 1000000);
         if (o.num_classes == 1) bad("--num-classes", "must be 0 (the variant's own) or at least 2, got '1'");
       },
       [](const Options& o) { return std::to_string(o.num_classes); }},
      {"batch-size", "B", "images per rank per step",
       [](Options& o, const std::string& v) { o.batch_size = (int)parse_int("--batch-size", v, 1, 65536); },
       [](const Options& o) { return std::to_string(o.batch_size); }},
      {"grad-accum-steps", "K", "gradient accumulation: K micro-batches of --batch-size per optimizer step, all-reduce only after the last (DDP no_sync); the step equals one of batch K x B",
       [](Options& o, const std::string& v) { o.grad_accum_steps = (int)parse_int("--grad-accum-steps", v, 1, 4096); },
       [](const Options& o) { return std::to_string(o.grad_accum_steps); }},
      {"warmup-steps", "N", "untimed steps before the timed window (the article: 10)",
       [](Options& o, const std::string& v) { o.warmup_steps = (int)parse_int("--warmup-steps", v, 0, kMaxSteps); },
       [](const Options& o) { return std::to_string(o.warmup_steps); }},
      {"steps", "N", "timed steps; the profiler capture range covers exactly them (the article: 3)",
       [](Options& o, const std::string& v) { o.steps = (int)parse_int("--steps", v, 1, kMaxSteps); },
       [](const Options& o) { return std::to_string(o.steps); }},
      {"cooldown-steps", "N", "untimed steps after the timed window (the article: 1)",
       [](Options& o, const std::string& v) { o.cooldown_steps = (int)parse_int("--cooldown-steps", v, 0, kMaxSteps); },
       [](const Options& o) { return std::to_string(o.cooldown_steps); }},
      {"backend", "gpu|cpu|auto", "gpu: CUDA + NCCL; cpu: the C++ reference + MPI all-reduce (slow: use a small model); auto: gpu when a CUDA device is visible",
       [](Options& o, const std::string& v) { o.backend = one_of("--backend", v, {"gpu", "cpu", "auto"}); },
       [](const Options& o) { return o.backend; }},
      {"data", "SOURCE", "synthetic: random normal images and labels made by host worker threads into pinned memory (the article's FakeDataset); device: made on the GPU; idx:DIR: an MNIST-format data set (e.g. idx:/usr/share/datasets/fashion-mnist), resized to the model's input",
       [](Options& o, const std::string& v) {
         if (v != "synthetic" && v != "device" && v.rfind("idx:", 0) != 0)
           bad("--data", "unknown source '" + v + "' (choose synthetic, device or idx:DIR)");
         if (v == "idx:") bad("--data", "idx: needs a directory, e.g. idx:/usr/share/datasets/fashion-mnist");
         o.data = v;
       },
       [](const Options& o) { return o.data; }},
      {"eval-every", "N", "evaluate top-1 accuracy and mean cross-entropy over the whole --eval-split (each sample once, split over ranks, forward only) after every N optimizer steps and after the last; 0 = never. Needs --data idx:DIR; results in eval/* of the results file",
       [](Options& o, const std::string& v) { o.eval_every = (int)parse_int("--eval-every", v, 0, kMaxSteps); },
       [](const Options& o) { return std::to_string(o.eval_every); }},
      {"eval-split", "test|train", "split --eval-every evaluates: test = DIR/t10k-{images-idx3,labels-idx1}-ubyte[.gz] next to the training files of --data idx:DIR; train = the training split",
       [](Options& o, const std::string& v) { o.eval_split = one_of("--eval-split", v, {"test", "train"}); },
       [](const Options& o) { return o.eval_split; }},
      {"data-workers", "N", "host threads that prepare batches ahead of the training loop",
       [](Options& o, const std::string& v) { o.data_workers = (int)parse_int("--data-workers", v, 1, 256); },
       [](const Options& o) { return std::to_string(o.data_workers); }},
      {"bucket-cap-mb", "MB", "DDP bucket capacity in MiB (PyTorch bucket_cap_mb); a bucket closes once it reaches this size",
       [](Options& o, const std::string& v) { o.bucket_cap_mb = parse_double("--bucket-cap-mb", v, 0, 1e6, true); },
       [](const Options& o) { return fmt(o.bucket_cap_mb); }},
      {"first-bucket-mb", "MB", "capacity of the first bucket in MiB (PyTorch: 1 MiB), which holds the first gradients ready",
       [](Options& o, const std::string& v) { o.first_bucket_mb = parse_double("--first-bucket-mb", v, 0, 1e6, true); },
       [](const Options& o) { return fmt(o.first_bucket_mb); }},
      {"no-ddp", nullptr, "train without any reducer or communication (the article's single-GPU baseline); requires 1 rank",
       [](Options& o, const std::string&) { o.ddp = false; },
       [](const Options& o) { return o.ddp ? std::string("false") : std::string("true"); }},
      {"no-overlap", nullptr, "launch every bucket's all-reduce after backward instead of as soon as the bucket is ready",
       [](Options& o, const std::string&) { o.overlap = false; },
       [](const Options& o) { return o.overlap ? std::string("false") : std::string("true"); }},
      {"grad-as-bucket-view", "on|off", "on: gradients are the DDP bucket, all-reduced in place (PyTorch gradient_as_bucket_view=True); off: a separate bucket buffer, gradients copied in (device-to-device) before and back after the all-reduce, to measure those copies",
       [](Options& o, const std::string& v) { o.grad_as_bucket_view = one_of("--grad-as-bucket-view", v, {"on", "off"}) == "on"; },
       [](const Options& o) { return o.grad_as_bucket_view ? std::string("on") : std::string("off"); }},
      {"compression", "none|fp16|bf16|powersgd", "DDP comm hook: none (fp32 average), fp16/bf16 (fp16_compress_hook/bf16_compress_hook: divide, cast, all-reduce in 16 bits), powersgd (powerSGD_hook, see --powersgd-*)",
       [](Options& o, const std::string& v) { o.compression = one_of("--compression", v, compression_names()); },
       [](const Options& o) { return o.compression; }},
      {"precision", "fp32|tf32|bf16", "numerics of the GPU model: fp32 = strict fp32 (no TF32); tf32 = the same with GEMMs, and the attention core for T <= 64 and head_dim 64, on TF32 tensor cores, fp32 accumulation (torch allow_tf32=True); bf16 = mixed precision as torch.autocast(bfloat16): bf16 GEMM and attention operands with fp32 accumulation, LayerNorm, softmax and loss in fp32, fp32 master weights, optimizer and gradients (the all-reduce still moves fp32). The CPU backend accepts only fp32",
       [](Options& o, const std::string& v) { o.precision = one_of("--precision", v, precision_names()); },
       [](const Options& o) { return o.precision; }},
      {"cuda-graph", "on|off", "GPU: on = from the second step, forward, backward and the bucketed NCCL all-reduces of a step are one CUDA graph, captured once and replayed (no per-kernel launch cost; the optimizer step follows eagerly); off = every kernel launched each step, with NVTX ranges for forward, backward and each bucket's all-reduce (with on, nsys shows one 'forward + backward (CUDA graph)' range per step). PowerSGD always runs eagerly",
       [](Options& o, const std::string& v) { o.cuda_graph = one_of("--cuda-graph", v, {"on", "off"}) == "on"; },
       [](const Options& o) { return std::string(o.cuda_graph ? "on" : "off"); }},
      {"attention", "auto|cudnn|custom", "attention core softmax(QK^T/sqrt(d))V of the GPU model: custom = this project's kernels (any precision; keep the probabilities for backward; with T <= 64 and head_dim 64, as in vit_l_32 and vit_b_32, tensor-core mma kernels, one block per batch and head: bf16 operands in bf16, TF32 in --precision tf32 (+5.2% steps/s, results/2026-11-30-issue5-session8), fp32 arithmetic in fp32); cudnn = cuDNN's fused flash attention (scaled dot-product attention through the cuDNN graph API; --precision bf16 only); auto = the one measured faster on an H200 (tests/gpu/bench_cudnn.cpp [attention_bench]): in bf16 custom for the tensor-core shapes (0.78 vs 1.30 ms per vit_l_32 step, forward + backward) and cudnn for the others (measured at the vit_l_32 shape against the fp32-arithmetic custom kernels: 1.31 vs 2.11 ms), custom in fp32/tf32",
       [](Options& o, const std::string& v) { o.attention = one_of("--attention", v, attention_choice_names()); },
       [](const Options& o) { return o.attention; }},
      {"patch-embed", "auto|cudnn|gemm", "patch embedding conv_proj of the GPU model: gemm = im2col + cuBLASLt GEMM; cudnn = cuDNN convolution (fp32, tf32; its bf16 weight gradient fails on cuDNN 9.14); auto = gemm, measured 2.6x (fp32) to 4.7x (tf32) faster than cuDNN on an H200 ([attention_bench])",
       [](Options& o, const std::string& v) { o.patch_embed = one_of("--patch-embed", v, patch_embed_choice_names()); },
       [](const Options& o) { return o.patch_embed; }},
      {"powersgd-rank", "R", "PowerSGD matrix_approximation_rank",
       [](Options& o, const std::string& v) { o.powersgd_rank = (int)parse_int("--powersgd-rank", v, 1, 1024); },
       [](const Options& o) { return std::to_string(o.powersgd_rank); }},
      {"powersgd-start-step", "N", "PowerSGD start_powerSGD_iter: plain fp32 all-reduce in the steps before it (PyTorch's default 1000 means no compression in a short run)",
       [](Options& o, const std::string& v) { o.powersgd_start_step = parse_int("--powersgd-start-step", v, 0, kMaxSteps); },
       [](const Options& o) { return std::to_string(o.powersgd_start_step); }},
      {"powersgd-min-compression-rate", "X", "PowerSGD min_compression_rate: a tensor viewed (n, m) is compressed iff (n + m) * rank * X < n * m",
       [](Options& o, const std::string& v) {
         o.powersgd_min_compression_rate = parse_double("--powersgd-min-compression-rate", v, 0, 1e9, false);
       },
       [](const Options& o) { return fmt(o.powersgd_min_compression_rate); }},
      {"powersgd-no-error-feedback", nullptr, "PowerSGD without error feedback (use_error_feedback=False)",
       [](Options& o, const std::string&) { o.powersgd_error_feedback = false; },
       [](const Options& o) { return o.powersgd_error_feedback ? std::string("false") : std::string("true"); }},
      {"powersgd-no-warm-start", nullptr, "PowerSGD without warm start: new random Qs every step (warm_start=False)",
       [](Options& o, const std::string&) { o.powersgd_warm_start = false; },
       [](const Options& o) { return o.powersgd_warm_start ? std::string("false") : std::string("true"); }},
      {"gemm-sm-carveout", "N", "SMs backward's cuBLASLt GEMMs leave free for a concurrent stream: they are planned for (SM count - N) SMs (CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, as PyTorch's SM carveout) and autotuned while a stand-in kernel holds N SMs, so a GEMM sized for every SM does not run its last thread blocks in a second wave. Measured (results/2026-11-30-issue5-overlap-2xH200): against a kernel that holds 8 SMs, bf16 backward loses 0.5 ms instead of 2.8 ms; against NCCL's all-reduce it did not help (within -4%..+1%). 0 = plan for every SM. GPU backend only",
       [](Options& o, const std::string& v) { o.gemm_sm_carveout = (int)parse_int("--gemm-sm-carveout", v, 0, 1024); },
       [](const Options& o) { return std::to_string(o.gemm_sm_carveout); }},
      {"nccl-max-ctas", "N", "cap the thread blocks (SMs) NCCL's kernels take from backward while they overlap it (ncclConfig_t maxCTAs); 0 = NCCL's choice",
       [](Options& o, const std::string& v) { o.nccl_max_ctas = (int)parse_int("--nccl-max-ctas", v, 0, 64); },
       [](const Options& o) { return std::to_string(o.nccl_max_ctas); }},
      {"allreduce", "nccl|copy-engine", "who all-reduces the buckets (GPU backend). nccl: ncclAllReduce, whose kernels hold SMs for as long as they run. copy-engine: for ranks on one node, a reduce-scatter and an all-gather by peer-to-peer copies (the GPUs' copy engines over NVLink, no SM) with a short sum kernel in between, synchronised by stream memory waits; same bytes as NCCL's ring, bit-identical results on all ranks; the sum also flags NaN/Inf, replacing the optimizer's separate pass over the gradients. Measured on 2 x H200 (results/2026-11-30-issue5-copy-engine-2xH200, results/2026-11-30-issue5-session8): 98-99.8% / 93.6-96% / 88-92% (bf16 with --comm-streams auto) of the 1-GPU throughput in fp32 / tf32 / bf16, where NCCL keeps 95% / 86% / 76-79%. Needs every rank on one node and CUDA IPC between their GPUs (it works with one GPU visible per rank, measured); a peer that hangs is caught by --step-timeout (no NCCL error to report it); not with --compression powersgd",
       [](Options& o, const std::string& v) { o.allreduce = one_of("--allreduce", v, {"nccl", "copy-engine"}); },
       [](const Options& o) { return o.allreduce; }},
      {"comm-streams", "auto|N", "--allreduce copy-engine: the comm streams (1 to 4) the buckets of a step alternate over (bucket b on stream b mod N), so one bucket's sum and all-gather overlap the next bucket's reduce-scatter. auto = 2 with --precision bf16 and --compression none, 1 otherwise: measured on 2 x H200 (results/2026-11-30-issue5-session8), bf16 kept 88.4-91.6% of the 1-GPU figure with 2 streams against 85.2-87.0% with 1 (job d: the exposed communication fell from 1.10 to 0.42 ms), while tf32, fp32 and bf16 compression changed by -0.7% to +0.1% with 2. With --allreduce nccl only 1 (NCCL's calls on one communicator run in order)",
       [](Options& o, const std::string& v) {
         if (v != "auto" && (v.size() != 1 || v[0] < '1' || v[0] > '4'))
           bad("--comm-streams", "expected auto or an integer in [1, 4], got '" + v + "'");
         o.comm_streams = v;
       },
       [](const Options& o) { return o.comm_streams; }},
      {"optimizer", "sgd|adamw", "sgd: torch.optim.SGD (--momentum, --weight-decay as L2 on the gradient); adamw: torch.optim.AdamW (--adam-beta1, --adam-beta2, --adam-eps, --weight-decay decoupled)",
       [](Options& o, const std::string& v) { o.optimizer = one_of("--optimizer", v, {"sgd", "adamw"}); },
       [](const Options& o) { return o.optimizer; }},
      {"lr", "X", "learning rate (SGD and AdamW); with --lr-schedule the value after warm-up (the peak)",
       [](Options& o, const std::string& v) { o.lr = parse_double("--lr", v, 0, 1e6, false); },
       [](const Options& o) { return fmt(o.lr); }},
      {"momentum", "X", "SGD momentum (torch.optim.SGD); not with --optimizer adamw",
       [](Options& o, const std::string& v) { o.momentum = parse_double("--momentum", v, 0, 1, false); },
       [](const Options& o) { return fmt(o.momentum); }},
      {"weight-decay", "X", "weight decay. SGD: L2, added to the gradient as torch.optim.SGD; AdamW: decoupled, p *= 1 - lr * wd, as torch.optim.AdamW. Our default is 0 for both (torch.optim.AdamW's is 1e-2: pass --weight-decay 0.01 for it)",
       [](Options& o, const std::string& v) { o.weight_decay = parse_double("--weight-decay", v, 0, 1e3, false); },
       [](const Options& o) { return fmt(o.weight_decay); }},
      {"adam-beta1", "X", "AdamW betas[0], the first-moment decay (torch default)",
       [](Options& o, const std::string& v) { o.adam_beta1 = parse_beta("--adam-beta1", v); },
       [](const Options& o) { return fmt(o.adam_beta1); }},
      {"adam-beta2", "X", "AdamW betas[1], the second-moment decay (torch default)",
       [](Options& o, const std::string& v) { o.adam_beta2 = parse_beta("--adam-beta2", v); },
       [](const Options& o) { return fmt(o.adam_beta2); }},
      {"adam-eps", "X", "AdamW eps, added to the denominator (torch default)",
       [](Options& o, const std::string& v) { o.adam_eps = parse_double("--adam-eps", v, 0, 1, true); },
       [](const Options& o) { return fmt(o.adam_eps); }},
      {"lr-schedule", "constant|cosine", "learning rate per optimizer step i (i counts every step of the run from 0: warm-up steps of the timing window and skipped non-finite steps included). constant: --lr after the linear warm-up; cosine: linear warm-up, then half a cosine from --lr down to --min-lr at step --lr-decay-steps (transformers get_cosine_schedule_with_warmup)",
       [](Options& o, const std::string& v) { o.lr_schedule = one_of("--lr-schedule", v, {"constant", "cosine"}); },
       [](const Options& o) { return o.lr_schedule; }},
      {"lr-warmup-steps", "N", "linear learning-rate warm-up: lr = --lr * i / N for optimizer steps i < N (0 at the first step); 0 = none. Not the timing window's --warmup-steps",
       [](Options& o, const std::string& v) { o.lr_warmup_steps = parse_int("--lr-warmup-steps", v, 0, kMaxSteps); },
       [](const Options& o) { return std::to_string(o.lr_warmup_steps); }},
      {"lr-decay-steps", "N", "cosine: the optimizer step at which the learning rate reaches --min-lr (held after it); 0 = the run's total steps (--warmup-steps + --steps + --cooldown-steps)",
       [](Options& o, const std::string& v) { o.lr_decay_steps = parse_int("--lr-decay-steps", v, 0, kMaxSteps); },
       [](const Options& o) { return std::to_string(o.lr_decay_steps); }},
      {"min-lr", "X", "cosine: the learning rate at the end of the decay, <= --lr",
       [](Options& o, const std::string& v) { o.min_lr = parse_double("--min-lr", v, 0, 1e6, false); },
       [](const Options& o) { return fmt(o.min_lr); }},
      {"seed", "N", "seed of parameter initialisation and synthetic data (same on every rank)",
       [](Options& o, const std::string& v) { o.seed = (uint64_t)parse_int("--seed", v, 0, (1ll << 62)); },
       [](const Options& o) { return std::to_string(o.seed); }},
      {"init", "torchvision|random", "parameter initialisation: torchvision's (zero head) or random everywhere",
       [](Options& o, const std::string& v) { o.init = one_of("--init", v, {"torchvision", "random"}); },
       [](const Options& o) { return o.init; }},
      {"init-from", "FILE", "start from the parameters in this HDF5 weights file (/params/<torchvision name>, as --save-weights and tests/reference/torch_twin.py write it) instead of --init",
       [](Options& o, const std::string& v) {
         if (v.empty()) bad("--init-from", "empty file name");
         o.init_from = v;
       },
       [](const Options& o) { return o.init_from; }},
      {"save-weights", "FILE", "rank 0 writes the final parameters to this HDF5 file under torchvision's names (torchvision loads them with load_state_dict); never overwritten unless --overwrite",
       [](Options& o, const std::string& v) {
         if (v.empty()) bad("--save-weights", "empty file name");
         o.save_weights = v;
       },
       [](const Options& o) { return o.save_weights; }},
      {"checkpoint-every", "N", "rank 0 writes a checkpoint (parameters, optimizer state, step, data position; also a weights file for --init-from) after every N optimizer steps, at the end of the run and when stopped by SIGTERM/SIGINT; 0 = never. Written to PATH.tmp, then renamed over PATH. With it (or --resume) the GPU picks its GEMM algorithms deterministically (no autotuning, about 2% slower) and cuDNN attention uses its deterministic backward, so a resumed run repeats the uninterrupted one bit for bit",
       [](Options& o, const std::string& v) { o.checkpoint_every = (int)parse_int("--checkpoint-every", v, 0, kMaxSteps); },
       [](const Options& o) { return std::to_string(o.checkpoint_every); }},
      {"checkpoint-path", "PATH", "checkpoint file; '{step}' in it is replaced by the step count (one file per checkpoint), else each checkpoint replaces the previous one (default: --out with .h5 replaced by .ckpt.h5)",
       [](Options& o, const std::string& v) {
         if (v.empty()) bad("--checkpoint-path", "empty file name");
         o.checkpoint_path = v;
       },
       [](const Options& o) { return o.checkpoint_path; }},
      {"resume", "FILE", "continue the run stored in this checkpoint: from its step S to this run's total steps (--warmup-steps + --steps + --cooldown-steps count from step 0 of the original run, so give the original values; larger ones extend it). Model, ranks, batch, data, seed, precision, optimizer and schedule must match the checkpoint; the results file holds steps S, S+1, .. only (steps are numbered from 0)",
       [](Options& o, const std::string& v) {
         if (v.empty()) bad("--resume", "empty file name");
         o.resume = v;
       },
       [](const Options& o) { return o.resume; }},
      {"out", "FILE", "HDF5 results file written by rank 0 (default: vitddp-<model>-np<ranks>-<time>.h5); never overwritten unless --overwrite",
       [](Options& o, const std::string& v) {
         if (v.empty()) bad("--out", "empty file name");
         o.out = v;
       },
       [](const Options& o) { return o.out; }},
      {"trace", "FILE.json", "also write the timeline as a Chrome trace-event file (one process per rank, one thread per stream) that Perfetto opens",
       [](Options& o, const std::string& v) {
         if (v.empty()) bad("--trace", "empty file name");
         o.trace = v;
       },
       [](const Options& o) { return o.trace; }},
      {"overwrite", nullptr, "allow replacing existing outputs (--out, --trace, --save-weights, checkpoints); never an input",
       [](Options& o, const std::string&) { o.overwrite = true; },
       [](const Options& o) { return o.overwrite ? std::string("true") : std::string("false"); }},
      {"progress-every", "N|auto", "rank 0 prints a progress line every N steps and after the last; auto (default): after the first, about every 5 s of wall time and after the last",
       [](Options& o, const std::string& v) { o.progress_every = v == "auto" ? 0 : (int)parse_int("--progress-every", v, 1, kMaxSteps); },
       [](const Options& o) { return o.progress_every == 0 ? std::string("auto") : std::to_string(o.progress_every); }},
      {"flush-every", "N", "flush the results file every N steps (a killed run keeps what was flushed)",
       [](Options& o, const std::string& v) { o.flush_every = (int)parse_int("--flush-every", v, 1, kMaxSteps); },
       [](const Options& o) { return std::to_string(o.flush_every); }},
      {"on-nonfinite", "stop|skip", "a step whose loss or averaged gradients hold NaN/Inf is never applied; then stop the run (exit code 4) or skip the step and go on (counted in training/nonfinite)",
       [](Options& o, const std::string& v) { o.on_nonfinite = one_of("--on-nonfinite", v, {"stop", "skip"}); },
       [](const Options& o) { return o.on_nonfinite; }},
      {"step-timeout", "SECONDS", "watchdog: if a step has not finished after this long (a peer died or hangs), the rank exits with code 3 and mpirun ends the job",
       [](Options& o, const std::string& v) { o.step_timeout_s = parse_double("--step-timeout", v, 0, 1e7, true); },
       [](const Options& o) { return fmt(o.step_timeout_s); }},
      {"debug-nan-at-step", "N", "testing only: rank 0's batch of step N gets a NaN pixel (-1: off); steps are numbered from 0 everywhere: console, results file, trace, checkpoints",
       [](Options& o, const std::string& v) { o.debug_nan_at_step = (int)parse_int("--debug-nan-at-step", v, -1, kMaxSteps); },
       [](const Options& o) { return std::to_string(o.debug_nan_at_step); }},
      {"debug-fail-at-step", "N", "testing only: rank --debug-fail-rank fails inside step N (0-based, as every step number), while its peers are inside the step's collectives (-1: off)",
       [](Options& o, const std::string& v) { o.debug_fail_at_step = (int)parse_int("--debug-fail-at-step", v, -1, kMaxSteps); },
       [](const Options& o) { return std::to_string(o.debug_fail_at_step); }},
      {"debug-fail-rank", "R", "testing only: the rank that fails (--debug-fail-at-step)",
       [](Options& o, const std::string& v) { o.debug_fail_rank = (int)parse_int("--debug-fail-rank", v, 0, 1000000); },
       [](const Options& o) { return std::to_string(o.debug_fail_rank); }},
      {"debug-fail-mode", "throw|exit|nccl-abort", "testing only: how that rank fails: throw (an exception: the error path, MPI_Abort of every rank), exit (the process ends with status 1 at once), nccl-abort (GPU: ncclCommAbort of its communicator with the all-reduces in flight; the peers' watchdog must end the job within --step-timeout)",
       [](Options& o, const std::string& v) { o.debug_fail_mode = one_of("--debug-fail-mode", v, {"throw", "exit", "nccl-abort"}); },
       [](const Options& o) { return o.debug_fail_mode; }},
      {"dry-run", nullptr, "print the device memory one rank of the GPU backend needs for this model, batch, precision, optimizer and reducer (item by item, from the sizes the allocations use) and exit without training; needs no GPU",
       [](Options& o, const std::string&) { o.dry_run = true; },
       [](const Options& o) { return o.dry_run ? std::string("true") : std::string("false"); }},
      {"debug-crash-in-checkpoint", nullptr, "testing only: rank 0 kills itself (SIGKILL) after writing the first checkpoint's .tmp file, before the rename",
       [](Options& o, const std::string&) { o.debug_crash_in_checkpoint = true; },
       [](const Options& o) { return o.debug_crash_in_checkpoint ? std::string("true") : std::string("false"); }},
      {"help", nullptr, "print this help and exit",
       [](Options& o, const std::string&) { o.help = true; }, [](const Options&) { return std::string("false"); }},
      {"version", nullptr, "print the version (git commit) and exit",
       [](Options& o, const std::string&) { o.version = true; }, [](const Options&) { return std::string("false"); }},
  };
  return specs;
}

/// Cross-option checks of --optimizer and the learning-rate schedule (OptionError naming one).
void check_optimizer_options(const Options& o) {
  if (o.optimizer == "adamw" && o.momentum != 0)
    bad("--momentum", "SGD only; with --optimizer adamw the first-moment decay is --adam-beta1");
  if (o.lr_schedule == "constant") {
    if (o.min_lr != 0) bad("--min-lr", "needs --lr-schedule cosine");
    if (o.lr_decay_steps != 0) bad("--lr-decay-steps", "needs --lr-schedule cosine");
    return;
  }
  if (o.min_lr > o.lr) bad("--min-lr", "must not exceed --lr (" + fmt(o.min_lr) + " > " + fmt(o.lr) + ")");
  const int64_t decay = o.lr_decay_steps > 0 ? o.lr_decay_steps : o.total_steps();
  if (decay <= o.lr_warmup_steps)
    bad("--lr-warmup-steps", "must be less than the cosine schedule's length " + std::to_string(decay) +
                                 (o.lr_decay_steps > 0 ? " (--lr-decay-steps)" : " (the run's total steps; see --lr-decay-steps)") +
                                 ", got " + std::to_string(o.lr_warmup_steps));
}

/// Cross-option checks of --checkpoint-every, --checkpoint-path and --resume.
void check_checkpoint_options(const Options& o) {
  if (!o.checkpoint_path.empty() && o.checkpoint_every == 0)
    bad("--checkpoint-path", "needs --checkpoint-every N (N > 0)");
  if (o.debug_crash_in_checkpoint && o.checkpoint_every == 0)
    bad("--debug-crash-in-checkpoint", "needs --checkpoint-every N (N > 0)");
  if (o.compression == "powersgd" && (o.checkpoint_every > 0 || !o.resume.empty()))
    bad("--compression", "powersgd: checkpoints do not hold PowerSGD's state (error feedback, warm-start Q, step "
                         "counter), so --checkpoint-every and --resume are not supported with it");
  if (!o.resume.empty() && !o.init_from.empty())
    bad("--init-from", "cannot be combined with --resume (the checkpoint holds the parameters)");
}

}  // namespace

Options parse_options(int argc, const char* const* argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) throw OptionError(arg + ": unexpected argument (options start with --; see --help)");
    std::string name = arg.substr(2), value;
    const size_t eq = name.find('=');
    const bool has_eq = eq != std::string::npos;
    if (has_eq) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    const Spec* spec = nullptr;
    for (const auto& s : table())
      if (name == s.name) spec = &s;
    if (!spec) throw OptionError("--" + name + ": unknown option");
    if (spec->metavar) {
      if (!has_eq) {
        if (i + 1 >= argc) throw OptionError("--" + name + ": missing value " + spec->metavar);
        value = argv[++i];
      }
    } else if (has_eq) {
      throw OptionError("--" + name + ": takes no value");
    }
    spec->set(o, value);
  }
  const std::string attention_error = attention_choice_error(o.attention, parse_precision(o.precision));
  if (!attention_error.empty()) throw OptionError(attention_error);
  const std::string patch_error = patch_embed_choice_error(o.patch_embed, parse_precision(o.precision));
  if (!patch_error.empty()) throw OptionError(patch_error);
  if (o.first_bucket_mb > o.bucket_cap_mb)
    throw OptionError("--first-bucket-mb: must not exceed --bucket-cap-mb (" + fmt(o.first_bucket_mb) +
                      " > " + fmt(o.bucket_cap_mb) + ")");
  check_optimizer_options(o);
  check_checkpoint_options(o);
  if (o.comm_streams != "auto" && o.comm_streams != "1" && o.allreduce != "copy-engine")
    bad("--comm-streams", o.comm_streams + ": more than one comm stream needs --allreduce copy-engine (NCCL's calls on one "
                          "communicator run in order)");
  if (o.allreduce == "copy-engine" && o.compression == "powersgd")
    bad("--allreduce", "copy-engine: not with --compression powersgd (its all-reduces of P and Q use NCCL)");
  if (o.eval_every > 0 && o.data.rfind("idx:", 0) != 0)
    throw OptionError("--eval-every: --data " + o.data + " has no --eval-split " + o.eval_split +
                      " to evaluate; use --data idx:DIR (an MNIST-format data set with its t10k test files)");
  return o;
}

std::string help_text() {
  std::ostringstream s;
  s << "vitddp: data-parallel Vision Transformer training (MPI + NCCL), timings in HDF5.\n\n"
       "Usage: mpirun -np <ranks> vitddp [options]\n"
       "One MPI rank per GPU. Each step: get batch -> forward -> backward with bucketed all-reduce\n"
       "overlapped on a separate stream -> optimizer step (SGD or AdamW). Every phase and bucket is timed with CUDA events\n"
       "and written by rank 0 to the results file (see results/SCHEMA.md).\n\nOptions (default in brackets):\n";
  const Options d;
  for (const auto& sp : table()) {
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
  s << "\nExamples:\n"
       "  mpirun -np 2 vitddp --out run.h5                       # ViT-L/32, batch 32, fp32, 25 MiB buckets\n"
       "  mpirun -np 1 vitddp --no-ddp --out single.h5           # the article's single-GPU baseline\n"
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

ReducerOptions reducer_options(const Options& o) {
  ReducerOptions r;
  r.overlap = o.overlap;
  r.grad_as_bucket_view = o.grad_as_bucket_view;
  r.compression = o.compression;
  r.allreduce = o.allreduce;
  if (o.comm_streams != "auto") r.comm_streams = (int)parse_int("--comm-streams", o.comm_streams, 1, 4);
  else r.comm_streams = r.allreduce == "copy-engine" && o.precision == "bf16" && o.compression == "none" ? 2 : 1;
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
