// --debug-fail-* options (src/app/fault_injection.h): parsing, the checks against the job, when they fire.
#include "src/app/fault_injection.h"
#include "tests/test_util.h"

using namespace vitddp;
using vitddp_test::parse_args;

TEST_CASE("fault injection options: parsed, checked against the job, due on one rank and step", "[fault]") {
  const Options off = parse_args({});
  CHECK(off.debug_fail_at_step == -1);
  CHECK(FaultInjection::check(off, 2).empty());
  CHECK_FALSE(FaultInjection(off).due(0, 0));

  const Options o = parse_args({"--debug-fail-at-step", "3", "--debug-fail-rank", "1", "--debug-fail-mode", "exit"});
  const FaultInjection f(o);
  CHECK(f.due(3, 1));
  CHECK_FALSE(f.due(3, 0));
  CHECK_FALSE(f.due(2, 1));
  CHECK(FaultInjection::check(o, 2).empty());
  CHECK_THAT(FaultInjection::check(o, 1), Catch::Contains("--debug-fail-rank: rank 1 does not exist in a job of 1 rank(s)"));

  // nccl-abort against the backend, --no-ddp and --allreduce: rules of validate_options.
  const Options nccl = parse_args({"--debug-fail-at-step", "1", "--debug-fail-mode", "nccl-abort", "--backend", "gpu"});
  CHECK(FaultInjection::check(nccl, 2).empty());
  CHECK_THAT(vitddp_test::option_error({"--debug-fail-at-step", "1", "--debug-fail-mode", "nccl-abort", "--backend", "cpu"}),
             Catch::Contains("needs the GPU backend"));
  CHECK_THAT(vitddp_test::option_error({"--debug-fail-at-step", "1", "--debug-fail-mode", "nccl-abort", "--no-ddp"}),
             Catch::Contains("needs the GPU backend with DDP"));
  CHECK_THAT(vitddp_test::option_error({"--debug-fail-at-step", "1", "--debug-fail-mode", "nccl-abort", "--allreduce", "copy-engine"}),
             Catch::Contains("--allreduce copy-engine the gradients do not go through NCCL"));
  CHECK_THROWS_WITH(parse_args({"--debug-fail-mode", "segv"}), Catch::Contains("--debug-fail-mode: unknown value 'segv'"));
  CHECK_THROWS_WITH(parse_args({"--debug-fail-rank", "-1"}), Catch::Contains("--debug-fail-rank"));
}
