// Option parsing: defaults as the article, every bad value names its option.
#include "src/options.h"
#include "tests/catch.h"

using namespace vitddp;

namespace {
Options parse(std::vector<std::string> args) {
  std::vector<const char*> argv = {"vitddp"};
  for (auto& a : args) argv.push_back(a.c_str());
  return parse_options((int)argv.size(), argv.data());
}

std::string error_of(std::vector<std::string> args) {
  try {
    parse(args);
  } catch (const OptionError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("defaults reproduce the article's setup", "[options]") {
  const Options o = parse({});
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
  const Options o = parse({"--batch-size", "8", "--bucket-cap-mb=100", "--no-overlap", "--data", "idx:/tmp", "--lr", "0.5"});
  CHECK(o.batch_size == 8);
  CHECK(o.bucket_cap_mb == 100.0);
  CHECK_FALSE(o.overlap);
  CHECK(o.data == "idx:/tmp");
  CHECK(o.lr == 0.5);
}

TEST_CASE("bad options give one line naming the option and the reason", "[options]") {
  CHECK(error_of({"--batch-size", "0"}) == "--batch-size: must be in [1, 65536], got '0'");
  CHECK(error_of({"--batch-size", "-3"}) == "--batch-size: must be in [1, 65536], got '-3'");
  CHECK(error_of({"--batch-size", "abc"}) == "--batch-size: expected an integer, got 'abc'");
  CHECK(error_of({"--bucket-cap-mb", "0"}).rfind("--bucket-cap-mb: must be in (0", 0) == 0);
  CHECK(error_of({"--lr", "nan"}) == "--lr: expected a finite number, got 'nan'");
  CHECK(error_of({"--model", "resnet50"}).rfind("--model: unknown value 'resnet50'", 0) == 0);
  CHECK(error_of({"--backend", "tpu"}).rfind("--backend: unknown value 'tpu'", 0) == 0);
  CHECK(error_of({"--data", "imagenet"}).rfind("--data: unknown source 'imagenet'", 0) == 0);
  CHECK(error_of({"--frobnicate"}) == "--frobnicate: unknown option");
  CHECK(error_of({"--steps"}) == "--steps: missing value N");
  CHECK(error_of({"--no-ddp=1"}) == "--no-ddp: takes no value");
  CHECK(error_of({"--steps", "0"}).rfind("--steps: must be in [1,", 0) == 0);
  CHECK(error_of({"--first-bucket-mb", "50"}).rfind("--first-bucket-mb: must not exceed --bucket-cap-mb", 0) == 0);
  CHECK(error_of({"stray"}).rfind("stray: unexpected argument", 0) == 0);
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
  CHECK(parse({}).precision == "fp32");
  CHECK(parse({"--precision", "tf32"}).precision == "tf32");
  CHECK(parse({"--precision=bf16"}).precision == "bf16");
  CHECK(error_of({"--precision", "fp16"}) == "--precision: unknown value 'fp16' (choose one of: fp32, tf32, bf16)");
}
