// Option parsing: defaults as the article, every bad value names its option.
#include <stdexcept>
#include <string>

#include "model/kernel_choice.h"
#include "src/options.h"
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
  CHECK(o.data == "idx:/tmp");
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
  CHECK(option_error({"--model", "resnet50"}).rfind("--model: unknown value 'resnet50'", 0) == 0);
  CHECK(option_error({"--backend", "tpu"}).rfind("--backend: unknown value 'tpu'", 0) == 0);
  CHECK(option_error({"--data", "imagenet"}).rfind("--data: unknown source 'imagenet'", 0) == 0);
  CHECK(option_error({"--frobnicate"}) == "--frobnicate: unknown option");
  CHECK(option_error({"--steps"}) == "--steps: missing value N");
  CHECK(option_error({"--no-ddp=1"}) == "--no-ddp: takes no value");
  CHECK(option_error({"--steps", "0"}).rfind("--steps: must be in [1,", 0) == 0);
  CHECK(option_error({"--first-bucket-mb", "50"}).rfind("--first-bucket-mb: must not exceed --bucket-cap-mb", 0) == 0);
  CHECK(option_error({"stray"}).rfind("stray: unexpected argument", 0) == 0);
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
  CHECK(parse_args({}).comm_streams == "auto");
  CHECK(streams({}) == 1);  // NCCL
  CHECK(streams({"--allreduce", "copy-engine", "--precision", "bf16"}) == 2);
  CHECK(streams({"--allreduce", "copy-engine", "--precision", "bf16", "--compression", "bf16"}) == 1);
  CHECK(streams({"--allreduce", "copy-engine", "--precision", "tf32"}) == 1);
  CHECK(streams({"--allreduce", "copy-engine"}) == 1);  // fp32
  CHECK(streams({"--allreduce", "copy-engine", "--comm-streams", "3"}) == 3);
  CHECK(streams({"--comm-streams", "1"}) == 1);
  CHECK(option_error({"--comm-streams", "2"}).rfind("--comm-streams: 2: more than one comm stream needs --allreduce copy-engine", 0) == 0);
  CHECK(option_error({"--allreduce", "copy-engine", "--comm-streams", "5"}) ==
        "--comm-streams: expected auto or an integer in [1, 4], got '5'");
  CHECK(option_error({"--allreduce", "copy-engine", "--comm-streams", "two"}) ==
        "--comm-streams: expected auto or an integer in [1, 4], got 'two'");
}

TEST_CASE("--allreduce: nccl by default, copy-engine accepted, not with PowerSGD", "[options]") {
  CHECK(parse_args({}).allreduce == "nccl");
  const Options o = parse_args({"--allreduce", "copy-engine", "--compression", "bf16"});
  CHECK(o.allreduce == "copy-engine");
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
  CHECK(parse_args({}).precision == "fp32");
  CHECK(parse_args({"--precision", "tf32"}).precision == "tf32");
  CHECK(parse_args({"--precision=bf16"}).precision == "bf16");
  CHECK(option_error({"--precision", "fp16"}) == "--precision: unknown value 'fp16' (choose one of: fp32, tf32, bf16)");
}

TEST_CASE("--attention and --patch-embed: auto by default; cuDNN attention only in bf16", "[options]") {
  CHECK(parse_args({}).attention == "auto");
  CHECK(parse_args({}).patch_embed == "auto");
  CHECK(parse_args({"--attention", "custom"}).attention == "custom");
  CHECK(parse_args({"--attention", "cudnn", "--precision", "bf16"}).attention == "cudnn");
  CHECK(parse_args({"--patch-embed", "cudnn"}).patch_embed == "cudnn");
  CHECK(parse_args({"--patch-embed=gemm", "--precision", "tf32"}).patch_embed == "gemm");
  CHECK(option_error({"--attention", "flash"}) == "--attention: unknown value 'flash' (choose one of: auto, cudnn, custom)");
  CHECK(option_error({"--patch-embed", "fft"}) == "--patch-embed: unknown value 'fft' (choose one of: auto, cudnn, gemm)");
  for (const char* p : {"fp32", "tf32"}) {
    const std::string e = option_error({"--attention", "cudnn", "--precision", p});
    INFO(e);
    CHECK(e.rfind("--attention cudnn: needs --precision bf16", 0) == 0);
    CHECK(e.find(std::string("got --precision ") + p) != std::string::npos);
  }
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
  CHECK(attention_mma_shape(1, 64));
  CHECK_FALSE(attention_mma_shape(0, 64));
  CHECK_FALSE(attention_mma_shape(50, 32));
  CHECK(resolve_attention("auto", Precision::bf16, 4) == AttentionImpl::custom);  // vit_micro: not a cuDNN shape
  CHECK(resolve_attention("auto", Precision::fp32) == AttentionImpl::custom);
  CHECK(resolve_attention("auto", Precision::tf32) == AttentionImpl::custom);
  CHECK(resolve_attention("cudnn", Precision::bf16) == AttentionImpl::cudnn);
  CHECK_THROWS_AS(resolve_attention("cudnn", Precision::fp32), std::invalid_argument);
  CHECK_THROWS_AS(resolve_attention("flash", Precision::bf16), std::invalid_argument);
  CHECK_THROWS_AS(resolve_patch_embed("fft", Precision::bf16), std::invalid_argument);
  CHECK(std::string(attention_impl_name(AttentionImpl::cudnn)) == "cudnn");
  CHECK(std::string(patch_embed_impl_name(PatchEmbedImpl::gemm)) == "gemm");
}
