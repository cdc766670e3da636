// Gradient accumulation: k micro-steps of batch b take the same optimizer step as one step of k*b.
#include "src/engines/engine.h"
#include "tests/catch.h"
#include "tests/grad_accum_check.h"

using namespace vitddp;

TEST_CASE("2 micro-steps of batch 2 equal one step of batch 4 (CPU engine)", "[grad_accum]") {
  Options o;
  o.model = "vit_micro";
  vitddp_test::check_grad_accum(o, make_cpu_engine, 1e-6);
}
