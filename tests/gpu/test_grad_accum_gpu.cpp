// Gradient accumulation: k micro-steps of batch b take the same optimizer step as one step of k*b.
#include "src/engines/engine.h"
#include "tests/catch.h"
#include "tests/grad_accum_check.h"

using namespace vitddp;

TEST_CASE("2 micro-steps of batch 2 equal one step of batch 4 (GPU engine)", "[gpu][grad_accum]") {
  Options o;
  o.model = "vit_tiny";
  o.data_workers = 1;
  // fp32 GPU arithmetic, different reduction orders: parameters agree to 1e-5.
  vitddp_test::check_grad_accum(o, make_gpu_engine, 1e-5);
}
