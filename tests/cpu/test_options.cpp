// Option parsing: defaults as the article, every bad value names its option.
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>

#include "model/kernel_choice.h"
#include "mpi/hooks/comm_hook.h"
#include "src/app/options.h"
#include "src/app/rank_agreement.h"
#include "tests/catch.h"
#include "tests/test_util.h"

using namespace vitddp;
using vitddp_test::option_error;
using vitddp_test::parse_args;

TEST_CASE("defaults reproduce the article's setup", "[options]") {
  const Options o = parse_args({});
  CHECK(o.model == "vit_l_32");
  CHECK(o.batch_size == 32);
  CHECK(o.warmup_steps == 10);
  CHECK(o.steps == 3);
  CHECK(o.cooldown_steps == 1);
  CHECK(o.bucket_cap_mb == 25.0);
  CHECK(o.first_bucket_mb == 1.0);
  CHECK(o.lr == 1e-3);
  CHECK(o.ddp);
  CHECK(o.overlap);
}

TEST_CASE("values are parsed in both spellings", "[options]") {
  const Options o = parse_args({"--batch-size", "8", "--bucket-cap-mb=100", "--no-overlap", "--data", "idx:/tmp", "--lr", "0.5"});
  CHECK(o.batch_size == 8);
  CHECK(o.bucket_cap_mb == 100.0);
  CHECK_FALSE(o.overlap);
  CHECK(o.data.kind == DataSpec::Kind::idx);
  CHECK(o.data.dir == "/tmp");
  CHECK(o.lr == 0.5);
}

TEST_CASE("bad options give one line naming the option and the reason", "[options]") {
  CHECK(option_error({"--batch-size", "0"}) == "--batch-size: must be in [1, 65536], got '0'");
  CHECK(option_error({"--batch-size", "-3"}) == "--batch-size: must be in [1, 65536], got '-3'");
  CHECK(option_error({"--batch-size", "abc"}) == "--batch-size: expected an integer, got 'abc'");
  CHECK(option_error({"--batch-size", "99999999999999999999"}) ==
        "--batch-size: must be in [1, 65536], got '99999999999999999999'");
  CHECK(option_error({"--num-classes", "1"}) == "--num-classes: must be 0 (the variant's own) or at least 2, got '1'");
  CHECK(parse_args({"--num-classes", "2"}).num_classes == 2);
  CHECK(option_error({"--bucket-cap-mb", "0"}).rfind("--bucket-cap-mb: must be in (0", 0) == 0);
  CHECK(option_error({"--lr", "nan"}) == "--lr: expected a finite number, got 'nan'");
  CHECK(option_error({"--lr", "0x10"}) == "--lr: expected a finite number, got '0x10'");  // strtod: 16
  CHECK(option_error({"--lr", " 0.1"}) == "--lr: expected a finite number, got ' 0.1'");
  CHECK(option_error({"--lr", "1e-320"}) == "--lr: '1e-320' is closer to 0 than the smallest normal double (about 2.2e-308)");
  CHECK(option_error({"--lr", "1e999"}) == "--lr: expected a finite number, got '1e999'");
  CHECK(option_error({"--steps", " 5"}) == "--steps: expected an integer, got ' 5'");
  CHECK(parse_args({"--lr", "1e-3"}).lr == 1e-3);
  CHECK(option_error({"--model", "resnet50"}).rfind("--model: unknown value 'resnet50'", 0) == 0);
  CHECK(option_error({"--backend", "tpu"}).rfind("--backend: unknown value 'tpu'", 0) == 0);
  CHECK(option_error({"--data", "imagenet"}).rfind("--data: unknown source 'imagenet'", 0) == 0);
  CHECK(option_error({"--frobnicate"}) == "unknown option '--frobnicate'");
  CHECK(option_error({"--steps"}) == "--steps: missing value N");
  CHECK(option_error({"--no-ddp=1"}) == "--no-ddp: takes no value");
  CHECK(option_error({"--steps", "0"}).rfind("--steps: must be in [1,", 0) == 0);
  CHECK(option_error({"--first-bucket-mb", "50"}).rfind("--first-bucket-mb: must not exceed --bucket-cap-mb", 0) == 0);
  CHECK(option_error({"stray"}).rfind("stray: unexpected argument", 0) == 0);
}

TEST_CASE("--gemm-autotune: 16 candidates by default, 0 to 32; no effect with --checkpoint-every or --resume",
          "[options]") {
  CHECK(parse_args({}).gemm_autotune == 16);
  CHECK(parse_args({"--gemm-autotune", "0"}).gemm_autotune == 0);
  CHECK(parse_args({"--gemm-autotune", "32"}).gemm_autotune == 32);
  CHECK(option_error({"--gemm-autotune", "33"}) == "--gemm-autotune: must be in [0, 32], got '33'");
  CHECK(option_error({"--gemm-autotune", "-1"}) == "--gemm-autotune: must be in [0, 32], got '-1'");
  CHECK(option_error({"--gemm-autotune", "4", "--checkpoint-every", "10"}) ==
        "--gemm-autotune: has no effect with --checkpoint-every or --resume (they take cuBLASLt's first heuristic "
        "choice, so that a resumed run repeats the same bits)");
  CHECK(option_error({"--gemm-autotune", "0", "--resume", "c.h5"}).rfind("--gemm-autotune: has no effect", 0) == 0);
}

TEST_CASE("--gemm-sm-carveout and --nccl-max-ctas: 0 (off) by default, bounded", "[options]") {
  CHECK(parse_args({}).gemm_sm_carveout == 0);
  CHECK(parse_args({}).nccl_max_ctas == 0);
  CHECK(parse_args({"--gemm-sm-carveout", "16"}).gemm_sm_carveout == 16);
  CHECK(option_error({"--gemm-sm-carveout", "-1"}) == "--gemm-sm-carveout: must be in [0, 1024], got '-1'");
  CHECK(option_error({"--gemm-sm-carveout", "x"}) == "--gemm-sm-carveout: expected an integer, got 'x'");
}

TEST_CASE("--comm-streams: auto = 2 for the copy engine in bf16 without compression, else 1; N > 1 needs the copy engine",
          "[options]") {
  using namespace vitddp;
  auto streams = [](std::vector<std::string> a) { return reducer_options(parse_args(a)).comm_streams; };
  CHECK_FALSE(parse_args({}).comm_streams.has_value());
  CHECK(streams({}) == 1);  // NCCL
  CHECK(streams({"--allreduce", "copy-engine", "--precision", "bf16"}) == 2);
  CHECK(streams({"--allreduce", "copy-engine", "--precision", "bf16", "--compression", "bf16"}) == 1);
  CHECK(streams({"--allreduce", "copy-engine", "--precision", "tf32"}) == 1);
  CHECK(streams({"--allreduce", "copy-engine"}) == 1);  // fp32
  CHECK(streams({"--allreduce", "copy-engine", "--comm-streams", "3"}) == 3);
  CHECK(streams({"--allreduce", "copy-engine", "--comm-streams", "1"}) == 1);
  CHECK(streams({"--allreduce", "copy-engine", "--comm-streams", "auto", "--precision", "bf16"}) == 2);
  // With NCCL the option has no effect, whatever its value (also 1 and auto).
  for (const char* n : {"1", "2", "auto"})
    CHECK(option_error({"--comm-streams", n}).rfind("--comm-streams: has no effect with --allreduce nccl", 0) == 0);
  CHECK(option_error({"--allreduce", "copy-engine", "--comm-streams", "5"}) ==
        "--comm-streams: expected auto or an integer in [1, 4], got '5'");
  CHECK(option_error({"--allreduce", "copy-engine", "--comm-streams", "two"}) ==
        "--comm-streams: expected auto or an integer in [1, 4], got 'two'");
}

TEST_CASE("--allreduce: nccl by default, copy-engine accepted, not with PowerSGD", "[options]") {
  CHECK(parse_args({}).allreduce == AllReduceImpl::Nccl);
  const Options o = parse_args({"--allreduce", "copy-engine", "--compression", "bf16"});
  CHECK(o.allreduce == AllReduceImpl::CopyEngine);
  CHECK(reducer_options(o).allreduce == "copy-engine");
  CHECK(reducer_options(parse_args({})).allreduce == "nccl");
  CHECK(option_error({"--allreduce", "mpi"}) == "--allreduce: unknown value 'mpi' (choose one of: nccl, copy-engine)");
  CHECK(option_error({"--allreduce", "copy-engine", "--compression", "powersgd"}).rfind(
            "--allreduce: copy-engine: not with --compression powersgd", 0) == 0);
}

TEST_CASE("help lists every option", "[options]") {
  const std::string h = help_text();
  for (const auto& [name, value] : option_values(Options{})) {
    INFO(name);
    CHECK(h.find("--" + name) != std::string::npos);
  }
  CHECK(h.find("--help") != std::string::npos);
}

TEST_CASE("--precision: fp32 by default, tf32 and bf16 accepted, anything else named", "[options]") {
  CHECK(parse_args({}).precision == Precision::fp32);
  CHECK(parse_args({"--precision", "tf32"}).precision == Precision::tf32);
  CHECK(parse_args({"--precision=bf16"}).precision == Precision::bf16);
  CHECK(option_error({"--precision", "fp16"}) == "--precision: unknown value 'fp16' (choose one of: fp32, tf32, bf16)");
}

TEST_CASE("--attention and --patch-embed: auto by default; cuDNN attention only in bf16", "[options]") {
  CHECK(parse_args({}).attention == AttentionChoice::Auto);
  CHECK(parse_args({}).patch_embed == PatchEmbedChoice::Auto);
  CHECK(parse_args({"--attention", "custom"}).attention == AttentionChoice::Custom);
  CHECK(parse_args({"--attention", "cudnn", "--precision", "bf16"}).attention == AttentionChoice::Cudnn);
  CHECK(parse_args({"--patch-embed", "cudnn"}).patch_embed == PatchEmbedChoice::Cudnn);
  CHECK(parse_args({"--patch-embed=gemm", "--precision", "tf32"}).patch_embed == PatchEmbedChoice::Gemm);
  CHECK(option_error({"--attention", "flash"}) == "--attention: unknown value 'flash' (choose one of: auto, cudnn, custom, gemm, gemm-recompute)");
  CHECK(option_error({"--patch-embed", "fft"}) == "--patch-embed: unknown value 'fft' (choose one of: auto, cudnn, gemm)");
  for (const char* p : {"fp32", "tf32"}) {
    const std::string e = option_error({"--attention", "cudnn", "--precision", p});
    INFO(e);
    CHECK(e.rfind("--attention cudnn: needs --precision bf16", 0) == 0);
    CHECK(e.find(std::string("got --precision ") + p) != std::string::npos);
  }
  // cuDNN's flash attention takes head dimensions that are multiples of 8 up to 256: vit_micro's
  // heads of 4 are refused when the options are read, vit_tiny's of 16 are not.
  CHECK(option_error({"--attention", "cudnn", "--precision", "bf16", "--model", "vit_micro"}) ==
        "--attention cudnn: vit_micro's heads have 4 dimensions; cuDNN's flash attention takes a multiple of 8 up to "
        "256: use --attention custom or auto");
  CHECK(parse_args({"--attention", "cudnn", "--precision", "bf16", "--model", "vit_tiny"}).attention ==
        AttentionChoice::Cudnn);
}

TEST_CASE("option errors quote values on one line: control characters escaped, long values cut", "[options]") {
  CHECK(option_error({"--recompute-gelu", "on\n"}) ==
        "--recompute-gelu: unknown value 'on\\n' (choose one of: auto, on, off)");
  CHECK(option_error({"--batch-size", "3\t\x01"}) == "--batch-size: expected an integer, got '3\\t\\x01'");
  const std::string e = option_error({"--attention", std::string(5000, 'a')});
  CHECK(e == "--attention: unknown value '" + std::string(60, 'a') +
                 "...' (choose one of: auto, cudnn, custom, gemm, gemm-recompute)");
  CHECK(option_error({"--bogus\nx"}).rfind("unknown option '--bogus\\nx'", 0) == 0);
  CHECK(option_error({"stray\rarg"}).rfind("stray\\x0darg: unexpected argument", 0) == 0);
}

TEST_CASE("--recompute-gelu: auto by default, on in fp32 and tf32, off in bf16", "[options]") {
  CHECK(parse_args({}).recompute_gelu == RecomputeChoice::Auto);
  CHECK(parse_args({"--recompute-gelu", "on"}).recompute_gelu == RecomputeChoice::On);
  CHECK(parse_args({"--recompute-gelu=off"}).recompute_gelu == RecomputeChoice::Off);
  CHECK(option_error({"--recompute-gelu", "yes"}) == "--recompute-gelu: unknown value 'yes' (choose one of: auto, on, off)");
  CHECK(option_error({"--recompute-gelu", "on", "--backend", "cpu"}).rfind("--recompute-gelu on: needs the GPU backend", 0) == 0);
  using namespace vitddp;
  CHECK(resolve_recompute_gelu("auto", Precision::fp32));
  CHECK(resolve_recompute_gelu("auto", Precision::tf32));
  CHECK_FALSE(resolve_recompute_gelu("auto", Precision::bf16));
  for (const Precision p : {Precision::fp32, Precision::tf32, Precision::bf16}) {
    CHECK(resolve_recompute_gelu("on", p));
    CHECK_FALSE(resolve_recompute_gelu("off", p));
  }
  CHECK_THROWS_WITH(resolve_recompute_gelu("always", Precision::bf16),
                    "--recompute-gelu: unknown value 'always' (choose one of: auto, on, off)");
}

TEST_CASE("kernel choice: names map to implementations; auto never picks cuDNN attention outside bf16",
          "[options]") {
  using namespace vitddp;
  for (const Precision p : {Precision::fp32, Precision::tf32, Precision::bf16}) {
    CHECK(resolve_attention("custom", p) == AttentionImpl::custom);
    CHECK(resolve_patch_embed("gemm", p) == PatchEmbedImpl::gemm);
    if (p == Precision::bf16) CHECK_THROWS_AS(resolve_patch_embed("cudnn", p), std::invalid_argument);
    else CHECK(resolve_patch_embed("cudnn", p) == PatchEmbedImpl::cudnn);
    CHECK(resolve_patch_embed("auto", p) == PatchEmbedImpl::gemm);  // measured: GEMM is faster
  }
  CHECK(resolve_attention("auto", Precision::bf16) == AttentionImpl::cudnn);  // measured: cuDNN is faster
  CHECK(resolve_attention("auto", Precision::bf16, 64) == AttentionImpl::cudnn);
  // The tensor-core kernels' shapes (vit_l_32, vit_b_32: T = 50, head_dim 64): measured faster than cuDNN.
  CHECK(resolve_attention("auto", Precision::bf16, 64, 50) == AttentionImpl::custom);
  CHECK(resolve_attention("auto", Precision::bf16, 64, 64) == AttentionImpl::custom);
  CHECK(resolve_attention("auto", Precision::bf16, 64, 65) == AttentionImpl::cudnn);   // vit_b_16: T = 197
  CHECK(resolve_attention("auto", Precision::bf16, 80, 50) == AttentionImpl::cudnn);
  CHECK(resolve_attention("cudnn", Precision::bf16, 64, 50) == AttentionImpl::cudnn);
  CHECK_THROWS_AS(resolve_attention("cudnn", Precision::bf16, 4, 50), std::invalid_argument);  // not a cuDNN head
  CHECK(attention_mma_shape(1, 64));
  CHECK_FALSE(attention_mma_shape(0, 64));
  CHECK_FALSE(attention_mma_shape(50, 32));
  CHECK(resolve_attention("auto", Precision::bf16, 4) == AttentionImpl::custom);  // vit_micro: not a cuDNN shape
  CHECK(resolve_attention("auto", Precision::fp32) == AttentionImpl::custom);
  CHECK(resolve_attention("auto", Precision::tf32) == AttentionImpl::custom);
  // fp32 activations: the tensor-core / small kernels up to 64 tokens, batched GEMMs beyond
  // (vit_b_16 tf32: measured 8x faster than the fp32-arithmetic custom kernels).
  for (const Precision p : {Precision::fp32, Precision::tf32}) {
    CHECK(resolve_attention("auto", p, 64, 50) == AttentionImpl::custom);
    CHECK(resolve_attention("auto", p, 64, 64) == AttentionImpl::custom);
    CHECK(resolve_attention("auto", p, 64, 65) == AttentionImpl::gemm);
    CHECK(resolve_attention("auto", p, 64, 197) == AttentionImpl::gemm);
    CHECK(resolve_attention("auto", p, 80, 257) == AttentionImpl::gemm);
    CHECK(resolve_attention("gemm", p, 64, 50) == AttentionImpl::gemm);
    CHECK(resolve_attention("gemm-recompute", p, 64, 197) == AttentionImpl::gemm_recompute);
  }
  CHECK(parse_args({"--attention", "gemm-recompute"}).attention == AttentionChoice::GemmRecompute);
  CHECK(option_error({"--attention", "gemm-recompute", "--precision", "bf16"})
            .rfind("--attention gemm-recompute: needs --precision fp32 or tf32", 0) == 0);
  CHECK(std::string(attention_impl_name(AttentionImpl::gemm_recompute)) == "gemm-recompute");
  CHECK(is_gemm_attention(AttentionImpl::gemm));
  CHECK(is_gemm_attention(AttentionImpl::gemm_recompute));
  CHECK_FALSE(is_gemm_attention(AttentionImpl::custom));
  CHECK_THROWS_WITH(resolve_attention("gemm", Precision::bf16),
                    Catch::StartsWith("--attention gemm: needs --precision fp32 or tf32"));
  CHECK(option_error({"--attention", "gemm", "--precision", "bf16"}).rfind("--attention gemm: needs --precision fp32 or tf32", 0) == 0);
  CHECK(std::string(attention_impl_name(AttentionImpl::gemm)) == "gemm");
  CHECK(resolve_attention("cudnn", Precision::bf16) == AttentionImpl::cudnn);
  CHECK_THROWS_AS(resolve_attention("cudnn", Precision::fp32), std::invalid_argument);
  CHECK_THROWS_AS(resolve_attention("flash", Precision::bf16), std::invalid_argument);
  CHECK_THROWS_AS(resolve_patch_embed("fft", Precision::bf16), std::invalid_argument);
  CHECK_THROWS_WITH(resolve_attention("flash", Precision::bf16),
                    "--attention: unknown value 'flash' (choose one of: auto, cudnn, custom, gemm, gemm-recompute)");
  CHECK_THROWS_WITH(resolve_patch_embed("fft", Precision::bf16),
                    "--patch-embed: unknown value 'fft' (choose one of: auto, cudnn, gemm)");
  CHECK(std::string(attention_impl_name(AttentionImpl::cudnn)) == "cudnn");
  CHECK(std::string(patch_embed_impl_name(PatchEmbedImpl::gemm)) == "gemm");
}

// ------------------------------------------------------------------ typed values, parsing rules

TEST_CASE("to_string gives the command-line names; option_values holds them as before", "[options]") {
  // --compression's values are exactly the comm hooks the reducer's registry holds, in its order.
  std::vector<std::string> hooks;
  for (const Compression c : {Compression::None, Compression::Fp16, Compression::Bf16, Compression::PowerSgd})
    hooks.push_back(to_string(c));
  CHECK(hooks == compression_names());
  for (const Precision p : {Precision::fp32, Precision::tf32, Precision::bf16}) CHECK(to_string(p) == precision_name(p));
  for (const LrScheduleKind k : {LrScheduleKind::Constant, LrScheduleKind::WarmupCosine}) CHECK(to_string(k) == lr_schedule_name(k));
  CHECK(to_string(AllReduceImpl::CopyEngine) == "copy-engine");
  CHECK(to_string(FailMode::NcclAbort) == "nccl-abort");
  CHECK(to_string(DataSpec{DataSpec::Kind::idx, "/d"}) == "idx:/d");
  // The results file's option.* attributes of a default run, as the string options wrote them.
  std::map<std::string, std::string> v;
  for (const auto& [k, x] : option_values(Options{})) v[k] = x;
  CHECK(v["backend"] == "auto");
  CHECK(v["data"] == "synthetic");
  CHECK(v["eval-split"] == "test");
  CHECK(v["allreduce"] == "nccl");
  CHECK(v["comm-streams"] == "auto");
  CHECK(v["compression"] == "none");
  CHECK(v["precision"] == "fp32");
  CHECK(v["attention"] == "auto");
  CHECK(v["patch-embed"] == "auto");
  CHECK(v["recompute-gelu"] == "auto");
  CHECK(v["optimizer"] == "sgd");
  CHECK(v["lr-schedule"] == "constant");
  CHECK(v["init"] == "torchvision");
  CHECK(v["on-nonfinite"] == "stop");
  CHECK(v["debug-fail-mode"] == "throw");
  CHECK(v["cuda-graph"] == "on");
  CHECK(v["no-ddp"] == "false");
  CHECK(v["record-grad-ready"] == "false");
  CHECK(v["fp32-matmul"] == "ieee");
  CHECK(option_values(Options{}).size() == 69);
  std::map<std::string, std::string> g;
  for (const auto& [k, x] : option_values(parse_args({"--data", "idx:/x", "--eval-every", "2", "--eval-split", "train",
                                                      "--allreduce", "copy-engine", "--comm-streams", "3", "--init", "random",
                                                      "--on-nonfinite", "skip", "--lr-schedule", "cosine",
                                                      "--record-grad-ready"})))
    g[k] = x;
  CHECK(g["record-grad-ready"] == "true");
  CHECK(parse_args({"--no-ddp", "--record-grad-ready"}).record_grad_ready);  // also without DDP
  CHECK(g["data"] == "idx:/x");
  CHECK(g["eval-split"] == "train");
  CHECK(g["allreduce"] == "copy-engine");
  CHECK(g["comm-streams"] == "3");
  CHECK(g["init"] == "random");
  CHECK(g["on-nonfinite"] == "skip");
  CHECK(g["lr-schedule"] == "cosine");
}

TEST_CASE("parsing: repeats, an option as a value, negative numbers, suggestions", "[options]") {
  CHECK(option_error({"--steps", "2", "--steps", "3"}) == "--steps: given twice");
  CHECK(option_error({"--no-ddp", "--no-ddp"}) == "--no-ddp: given twice");
  CHECK(option_error({"--out=a.h5", "--out", "b.h5"}) == "--out: given twice");
  CHECK(option_error({"--out", "--overwrite"}) == "--out: expects a value, got the option '--overwrite'");
  CHECK(parse_args({"--debug-fail-at-step", "-1"}).debug_fail_at_step == -1);
  CHECK(parse_args({"--debug-nan-at-step", "-1"}).debug_nan_at_step == -1);
  CHECK(option_error({"--batch-sise", "4"}) == "unknown option '--batch-sise' (did you mean --batch-size?)");
  CHECK(option_error({"--stesp", "4"}) == "unknown option '--stesp' (did you mean --steps?)");  // transposition: 1 edit
  CHECK(option_error({"--checkpoint"}) == "unknown option '--checkpoint' (did you mean --checkpoint-every?)");  // prefix
  CHECK(option_error({"--bogus"}) == "unknown option '--bogus'");
  CHECK(parse_args({"--help", "--momentum", "0.9", "--optimizer", "adamw"}).help);  // --help: no validation
  // ... and wins over arguments that do not even parse.
  CHECK(parse_args({"--recompute-gelu", "bogus", "--help"}).help);
  CHECK(parse_args({"--bogus", "stray", "--help", "--batch-size"}).help);
  // --version the same way, after --help.
  const Options v = parse_args({"--version", "--steps", "0"});
  CHECK((v.version && !v.help));
  CHECK(parse_args({"--bogus", "--version"}).version);
  CHECK(parse_args({"--version", "--help"}).help);
}

TEST_CASE("the explicit backend: cpu refuses GPU-only options, auto defers them to main", "[options]") {
  const std::vector<std::pair<std::vector<std::string>, std::string>> gpu_only = {
      {{"--precision", "bf16"}, "--precision bf16: needs the GPU backend"},
      {{"--precision", "tf32"}, "--precision tf32: needs the GPU backend"},
      {{"--attention", "auto"}, "--attention auto: needs the GPU backend"},
      {{"--patch-embed", "gemm"}, "--patch-embed gemm: needs the GPU backend"},
      {{"--cuda-graph", "on"}, "--cuda-graph on: needs the GPU backend"},
      {{"--gemm-sm-carveout", "0"}, "--gemm-sm-carveout: needs the GPU backend (cuBLASLt)"},
      {{"--gemm-autotune", "0"}, "--gemm-autotune: needs the GPU backend (cuBLASLt)"},
      {{"--nccl-max-ctas", "4"}, "--nccl-max-ctas: needs the GPU backend (NCCL)"},
      {{"--allreduce", "copy-engine"}, "--allreduce copy-engine: needs the GPU backend"},
      {{"--allreduce", "nccl"}, "--allreduce nccl: needs the GPU backend"},
      {{"--data", "device"}, "--data device: needs the GPU backend"},
  };
  for (const auto& [args, want] : gpu_only) {
    INFO(want);
    std::vector<std::string> cpu = {"--backend", "cpu"}, gpu = {"--backend", "gpu"};
    cpu.insert(cpu.end(), args.begin(), args.end());
    gpu.insert(gpu.end(), args.begin(), args.end());
    CHECK(option_error(cpu).rfind(want, 0) == 0);
    CHECK(option_error(gpu).empty());
    CHECK(option_error(args).empty());  // --backend auto: checked again once resolved
    Options resolved = parse_args(args);
    resolved.backend = Backend::Cpu;
    CHECK_THROWS_WITH(validate_options(resolved), Catch::StartsWith(want));
  }
  CHECK(option_error({"--backend", "cpu", "--precision", "fp32"}).empty());  // the CPU backend's own precision
}

TEST_CASE("no-effect rule: one row per option, explicit defaults count as given", "[options]") {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--eval-split", "test"}, "--eval-split: has no effect without --eval-every N (N > 0)"},
      {{"--data", "device", "--data-workers", "2"}, "--data-workers: has no effect with --data device"},
      {{"--init", "random", "--init-from", "w.h5"}, "--init: has no effect with --init-from"},
      {{"--debug-nan-at-step", "14"}, "--debug-nan-at-step 14: has no effect: the run's last step is 13 (--warmup-steps 10 + --steps 3 + --cooldown-steps 1, numbered from 0)"},
      {{"--steps", "1", "--warmup-steps", "2", "--cooldown-steps", "0", "--debug-fail-at-step", "3"},
       "--debug-fail-at-step 3: has no effect: the run's last step is 2"},
      {{"--no-ddp", "--bucket-cap-mb", "25"}, "--bucket-cap-mb: has no effect with --no-ddp"},
      {{"--no-ddp", "--first-bucket-mb", "1"}, "--first-bucket-mb: has no effect with --no-ddp"},
      {{"--no-ddp", "--no-overlap"}, "--no-overlap: has no effect with --no-ddp"},
      {{"--no-ddp", "--grad-as-bucket-view", "on"}, "--grad-as-bucket-view: has no effect with --no-ddp"},
      {{"--no-ddp", "--compression", "none"}, "--compression: has no effect with --no-ddp"},
      {{"--no-ddp", "--allreduce", "nccl"}, "--allreduce: has no effect with --no-ddp"},
      {{"--no-ddp", "--nccl-max-ctas", "0"}, "--nccl-max-ctas: has no effect with --no-ddp"},
      {{"--no-ddp", "--comm-streams", "auto"}, "--comm-streams: has no effect with --no-ddp"},
      {{"--no-ddp", "--shard-optimizer"}, "--shard-optimizer: has no effect with --no-ddp (one replica, no reducer)"},
      {{"--powersgd-rank", "1"}, "--powersgd-rank: has no effect without --compression powersgd"},
      {{"--powersgd-start-step", "10"}, "--powersgd-start-step: has no effect without --compression powersgd"},
      {{"--powersgd-min-compression-rate", "2"}, "--powersgd-min-compression-rate: has no effect without --compression powersgd"},
      {{"--powersgd-no-error-feedback"}, "--powersgd-no-error-feedback: has no effect without --compression powersgd"},
      {{"--compression", "bf16", "--powersgd-no-warm-start"}, "--powersgd-no-warm-start: has no effect without --compression powersgd"},
      {{"--no-ddp", "--compression", "powersgd", "--powersgd-rank", "2"}, "--compression: has no effect with --no-ddp"},
      {{"--comm-streams", "1"}, "--comm-streams: has no effect with --allreduce nccl"},
      {{"--optimizer", "adamw", "--momentum", "0"}, "--momentum: has no effect with --optimizer adamw"},
      {{"--adam-beta1", "0.9"}, "--adam-beta1: has no effect with --optimizer sgd (AdamW only)"},
      {{"--adam-beta2", "0.99"}, "--adam-beta2: has no effect with --optimizer sgd (AdamW only)"},
      {{"--adam-eps", "1e-6"}, "--adam-eps: has no effect with --optimizer sgd (AdamW only)"},
      {{"--min-lr", "0"}, "--min-lr: has no effect with --lr-schedule constant (cosine only)"},
      {{"--lr-decay-steps", "0"}, "--lr-decay-steps: has no effect with --lr-schedule constant (cosine only)"},
      {{"--checkpoint-path", "c.h5"}, "--checkpoint-path: has no effect without --checkpoint-every N (N > 0)"},
      {{"--checkpoint-every", "0", "--checkpoint-path", "c.h5"}, "--checkpoint-path: has no effect without --checkpoint-every"},
      {{"--debug-crash-in-checkpoint"}, "--debug-crash-in-checkpoint: has no effect without --checkpoint-every N (N > 0)"},
      {{"--debug-fail-rank", "1"}, "--debug-fail-rank: has no effect without --debug-fail-at-step N (N >= 0)"},
      {{"--debug-fail-at-step", "-1", "--debug-fail-mode", "exit"}, "--debug-fail-mode: has no effect without --debug-fail-at-step"},
  };
  for (const auto& [args, want] : cases) {
    INFO(want);
    CHECK(option_error(args).rfind(want, 0) == 0);
  }
  // ... and the same options where they have an effect.
  for (const std::vector<std::string>& fine :
       {std::vector<std::string>{"--eval-every", "5", "--data", "idx:/x", "--eval-split", "train"},
        {"--data-workers", "2"},
        {"--compression", "powersgd", "--powersgd-rank", "2", "--powersgd-start-step", "0", "--powersgd-no-warm-start",
         "--powersgd-no-error-feedback"},
        {"--allreduce", "copy-engine", "--comm-streams", "2"},
        {"--optimizer", "adamw", "--adam-beta1", "0.8", "--adam-eps", "1e-6"},
        {"--momentum", "0.9"},
        {"--lr-schedule", "cosine", "--min-lr", "0", "--lr-decay-steps", "10"},
        {"--checkpoint-every", "2", "--checkpoint-path", "c.h5", "--debug-crash-in-checkpoint"},
        {"--debug-fail-at-step", "1", "--debug-fail-rank", "1", "--debug-fail-mode", "exit"},
        {"--init", "random", "--resume", "c.h5"},  // a resumed run repeats the original command line
        {"--no-ddp", "--data-workers", "1"}}) {
    INFO(fine.front());
    CHECK(option_error(fine).empty());
  }
}

TEST_CASE("combination rules: each names the option and the reason", "[options]") {
  CHECK(option_error({"--bucket-cap-mb", "2", "--first-bucket-mb", "3"}) == "--first-bucket-mb: must not exceed --bucket-cap-mb (3 > 2)");
  CHECK(option_error({"--bucket-cap-mb", "1e-7", "--first-bucket-mb", "1e-7"}).rfind("--bucket-cap-mb: below one byte", 0) == 0);
  CHECK(option_error({"--first-bucket-mb", "1e-300"}).rfind("--first-bucket-mb: below one byte", 0) == 0);
  CHECK(option_error({"--compression", "powersgd", "--checkpoint-every", "2"}).rfind("--compression: powersgd: checkpoints do not hold PowerSGD's state", 0) == 0);
  CHECK(option_error({"--compression", "powersgd", "--resume", "c.h5"}).rfind("--compression: powersgd:", 0) == 0);
  for (const char* start : {"0", "1"}) {  // PyTorch's PowerSGDState: start_powerSGD_iter > 1 with either
    CHECK(option_error({"--compression", "powersgd", "--powersgd-start-step", start}) ==
          std::string("--powersgd-start-step: ") + start +
              ": must be at least 2 with error feedback or warm start, as PyTorch's start_powerSGD_iter (add "
              "--powersgd-no-error-feedback --powersgd-no-warm-start to compress from step 0)");
    CHECK_FALSE(option_error({"--compression", "powersgd", "--powersgd-start-step", start, "--powersgd-no-warm-start"})
                    .empty());
    CHECK_FALSE(
        option_error({"--compression", "powersgd", "--powersgd-start-step", start, "--powersgd-no-error-feedback"})
            .empty());
  }
  CHECK(option_error({"--compression", "powersgd", "--powersgd-start-step", "2"}).empty());
  CHECK(option_error({"--resume", "c.h5", "--init-from", "w.h5"}) == "--init-from: cannot be combined with --resume (the checkpoint holds the parameters)");
  CHECK(option_error({"--eval-every", "3"}).rfind("--eval-every: --data synthetic has no --eval-split test to evaluate", 0) == 0);
  CHECK(option_error({"--lr-schedule", "cosine", "--lr", "0.1", "--min-lr", "0.2"}) == "--min-lr: must not exceed --lr (0.2 > 0.1)");
  CHECK(option_error({"--lr-schedule", "cosine", "--lr-warmup-steps", "14"})
            .rfind("--lr-warmup-steps: must be less than the cosine schedule's length 14 (the run's total steps", 0) == 0);
  CHECK(option_error({"--patch-embed", "cudnn", "--precision", "bf16"}).rfind("--patch-embed cudnn: not with --precision bf16", 0) == 0);
  CHECK(option_error({"--debug-fail-at-step", "1", "--debug-fail-mode", "nccl-abort", "--no-ddp"}) ==
        "--debug-fail-mode nccl-abort: needs the GPU backend with DDP (an NCCL communicator)");
  CHECK(option_error({"--debug-fail-at-step", "1", "--debug-fail-mode", "nccl-abort", "--allreduce", "copy-engine"}).rfind(
            "--debug-fail-mode nccl-abort: with --allreduce copy-engine the gradients do not go through NCCL", 0) == 0);
}

TEST_CASE("--shard-optimizer: off by default; the options its reduce-scatter cannot serve are refused with the reason",
          "[options][zero]") {
  CHECK_FALSE(Options{}.shard_optimizer);
  CHECK_FALSE(reducer_options(Options{}).shard_optimizer);
  CHECK(reducer_options(parse_args({"--shard-optimizer"})).shard_optimizer);
  CHECK(option_error({"--shard-optimizer", "--compression", "powersgd"}) ==
        "--compression: powersgd: not with --shard-optimizer (PowerSGD all-reduces the low-rank factors P and Q of "
        "whole gradient matrices; a reduce-scatter leaves each rank only its shard of the gradients)");
  for (const char* c : {"fp16", "bf16"})
    CHECK(option_error({"--shard-optimizer", "--compression", c}) ==
          "--compression: " + std::string(c) + ": not with --shard-optimizer (its reduce-scatter averages fp32 buckets; "
          "a 16-bit reduce-scatter is not implemented): use --compression none");
  CHECK(option_error({"--shard-optimizer", "--grad-as-bucket-view", "off"}).rfind(
            "--grad-as-bucket-view: off: not with --shard-optimizer (the reduce-scatter writes each rank's shard", 0) == 0);
  // Over the copy engines as over NCCL: fp32 buckets only.
  for (const char* c : {"fp16", "bf16"})
    CHECK(option_error({"--shard-optimizer", "--allreduce", "copy-engine", "--compression", c}) ==
          "--compression: " + std::string(c) + ": not with --shard-optimizer (its reduce-scatter averages fp32 buckets; "
          "a 16-bit reduce-scatter is not implemented): use --compression none");
  // What it combines with.
  for (const std::vector<std::string>& fine :
       {std::vector<std::string>{"--shard-optimizer", "--compression", "none", "--grad-as-bucket-view", "on"},
        {"--shard-optimizer", "--no-overlap", "--grad-accum-steps", "4", "--optimizer", "adamw"},
        {"--shard-optimizer", "--allreduce", "nccl", "--checkpoint-every", "5", "--bucket-cap-mb", "3"},
        {"--shard-optimizer", "--allreduce", "copy-engine", "--comm-streams", "2", "--precision", "bf16"},
        {"--shard-optimizer", "--backend", "cpu", "--momentum", "0.9"}}) {
    INFO(fine[1]);
    CHECK(option_error(fine).empty());
  }
  CHECK(help_text().find("--shard-optimizer") < help_text().find("Precision and speed"));  // the DDP group
}

TEST_CASE("--allgather-dtype: auto resolves by precision and rank count; bf16 needs --shard-optimizer and bf16",
          "[options][zero]") {
  CHECK(Options{}.allgather_dtype == AllGatherDtype::Auto);
  const Options bf = parse_args({"--shard-optimizer", "--precision", "bf16"});
  CHECK_FALSE(allgather_in_bf16(bf, 1));  // one rank moves nothing: stays bit-identical to --no-ddp
  CHECK(allgather_in_bf16(bf, 2));
  CHECK(allgather_in_bf16(bf, 8));
  CHECK_FALSE(allgather_in_bf16(parse_args({"--shard-optimizer", "--precision", "bf16", "--allgather-dtype", "fp32"}), 2));
  CHECK(allgather_in_bf16(parse_args({"--shard-optimizer", "--precision", "bf16", "--allgather-dtype", "bf16"}), 1));
  CHECK_FALSE(allgather_in_bf16(parse_args({"--shard-optimizer", "--precision", "tf32"}), 4));
  CHECK_FALSE(allgather_in_bf16(parse_args({"--shard-optimizer"}), 4));
  CHECK_FALSE(allgather_in_bf16(parse_args({"--precision", "bf16"}), 4));  // DDP gathers nothing
  // The CPU backend has no bf16 (--precision bf16 is refused there), so auto is fp32.
  CHECK_FALSE(allgather_in_bf16(parse_args({"--shard-optimizer", "--backend", "cpu"}), 4));
  // Rules, one line each naming the option.
  CHECK(option_error({"--precision", "bf16", "--allgather-dtype", "bf16"}) ==
        "--allgather-dtype: bf16: needs --shard-optimizer (only ZeRO-1 all-gathers the parameters; DDP all-reduces "
        "the gradients and every replica updates its own fp32 parameters)");
  CHECK(option_error({"--shard-optimizer", "--allgather-dtype", "bf16"}) ==
        "--allgather-dtype: bf16: needs --precision bf16 (the gathered bf16 copy is what the bf16 model reads; with "
        "--precision fp32 the model reads fp32 parameters)");
  CHECK(option_error({"--shard-optimizer", "--allgather-dtype", "bf16", "--precision", "tf32"}).rfind(
            "--allgather-dtype: bf16: needs --precision bf16", 0) == 0);
  CHECK(option_error({"--allgather-dtype", "fp32"}) ==
        "--allgather-dtype: has no effect without --shard-optimizer (DDP all-reduces the gradients and gathers no "
        "parameters)");
  CHECK(option_error({"--allgather-dtype", "auto"}).rfind("--allgather-dtype: has no effect without --shard-optimizer", 0) == 0);
  CHECK(option_error({"--no-ddp", "--allgather-dtype", "auto"}) ==
        "--allgather-dtype: has no effect with --no-ddp (one replica, no reducer)");
  CHECK(option_error({"--shard-optimizer", "--allgather-dtype", "fp16"}).rfind("--allgather-dtype: ", 0) == 0);
  CHECK(option_error({"--backend", "cpu", "--shard-optimizer", "--precision", "bf16", "--allgather-dtype", "bf16"})
            .rfind("--allgather-dtype: bf16: not with --backend cpu", 0) == 0);
  CHECK(option_error({"--backend", "cpu", "--shard-optimizer", "--allgather-dtype", "bf16"}) ==
        "--allgather-dtype: bf16: not with --backend cpu (the CPU backend computes and gathers in fp32 only)");
  for (const std::vector<std::string>& fine :
       {std::vector<std::string>{"--shard-optimizer", "--precision", "bf16", "--allgather-dtype", "bf16"},
        {"--shard-optimizer", "--precision", "bf16", "--allgather-dtype", "fp32"},
        {"--shard-optimizer", "--allgather-dtype", "fp32"},
        {"--shard-optimizer", "--allgather-dtype", "auto", "--backend", "cpu"}}) {
    INFO(fine[2]);
    CHECK(option_error(fine).empty());
  }
  CHECK(help_text().find("--allgather-dtype auto|fp32|bf16") < help_text().find("Precision and speed"));  // DDP group
}

TEST_CASE("--help: sections in order, one to three lines per option, defaults, no history", "[options]") {
  const std::string h = help_text();
  size_t at = 0;
  for (const char* s : {"Model and data", "DDP and communication", "Precision and speed", "Optimizer and schedule",
                        "Outputs", "Reliability", "Debug"}) {
    const size_t p = h.find(std::string("\n") + s + " ");
    INFO(s);
    CHECK(p != std::string::npos);
    CHECK(p > at);
    at = p;
  }
  for (const char* no : {"results/20", "session", "job d", "job a", "issue", "measured on"}) {
    INFO(no);
    CHECK(h.find(no) == std::string::npos);
  }
  // Each option's entry: its line and at most two continuation lines.
  std::istringstream lines(h);
  std::string line, current;
  std::map<std::string, int> count;
  while (std::getline(lines, line)) {
    if (line.rfind("  --", 0) == 0) {
      current = line.substr(2, line.find(' ', 2) - 2);
      count[current] = 1;
    } else if (!current.empty() && line.rfind(std::string(30, ' '), 0) == 0) {
      ++count[current];
    } else {
      current.clear();
    }
  }
  CHECK(count.size() == 71);
  for (const auto& [name, n] : count) {
    INFO(name);
    CHECK(n <= 3);
  }
  CHECK(h.find("--batch-size B              images per rank per micro-step [32]") != std::string::npos);
  CHECK(h.find("Examples:") != std::string::npos);
  // --dry-run says that it makes the run's checks and writes nothing.
  CHECK(h.find("--dry-run                   make the checks a run makes before training") != std::string::npos);
  CHECK(h.find("write no file") != std::string::npos);
}

TEST_CASE("differing_options: the options two command lines disagree on, order aside", "[options]") {
  using V = std::vector<std::string>;
  CHECK(differing_options({"--steps", "3", "--out", "a.h5"}, {"--out=a.h5", "--steps", "3"}).empty());
  CHECK(differing_options({"--steps", "3"}, {"--steps", "3", "--dry-run"}) == V{"--dry-run"});
  CHECK(differing_options({"--steps", "3", "--lr", "0.1"}, {"--steps", "4", "--lr", "0.1"}) == V{"--steps"});
  CHECK(differing_options({"--steps", "3"}, {"--steps", "3", "--steps", "3"}) == V{"--steps"});  // given twice on one
  CHECK(differing_options({"--version"}, {}) == V{"--version"});
  CHECK(differing_options({"stray"}, {}) == V{""});  // an argument before any option
}
