// The device-memory estimate (src/engines/memory_estimate.h) against what the GPU code really allocates:
// the engine's own count of its buffers, GpuViT's arena, and cudaMemGetInfo.
#include <cuda_runtime.h>

#include "cuda/model/gpu_vit.h"
#include "cuda/model/gpu_vit_arena.h"
#include "src/engines/engine.h"
#include "src/engines/memory_estimate.h"
#include "tests/catch.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/test_util.h"

using namespace vitddp;
using namespace vitddp_test;

TEST_CASE("memory estimate: equals the GPU engine's allocations (no DDP)", "[gpu][memory]") {
  REQUIRE_GPU();
  for (const char* precision : {"fp32", "bf16"}) {
    for (const char* momentum : {"0", "0.9"}) {
      // --attention custom: cuDNN's attention workspace is sized by cuDNN at set-up and is not in
      // the estimate (GpuViT::cudnn_bytes).
      const Options o = parse_args({"--model", "vit_micro", "--batch-size", "3", "--no-ddp", "--precision", precision,
                                    "--momentum", momentum, "--grad-accum-steps", "2", "--attention", "custom"});
      const ParamLayout L = make_param_layout(vit_config(o.model));
      const MemoryEstimate e = estimate_gpu_memory(o, L, {});
      size_t free_before = 0, free_after = 0, total = 0;
      CUDA_CHECK(cudaSetDevice(0));
      CUDA_CHECK(cudaMemGetInfo(&free_before, &total));
      auto engine = make_gpu_engine(o, World(), L, {}, nullptr);
      CUDA_CHECK(cudaMemGetInfo(&free_after, &total));
      INFO(precision << " momentum " << momentum);
      CHECK(engine->info().device_bytes == e.persistent_bytes());
      CHECK(free_before - free_after >= e.persistent_bytes());  // cudaMalloc rounds up, never down
    }
  }
}

TEST_CASE("memory estimate: equals the GPU engine's allocations with --optimizer-in-backward", "[gpu][memory]") {
  REQUIRE_GPU();
  for (const char* precision : {"fp32", "bf16"}) {
    const Options o = parse_args({"--model", "vit_micro", "--batch-size", "3", "--no-ddp", "--precision", precision,
                                  "--optimizer-in-backward", "--attention", "custom"});
    const ParamLayout L = make_param_layout(vit_config(o.model));
    const MemoryEstimate e = estimate_gpu_memory(o, L, {});
    CHECK(e.bytes_of("SGD in backward") > 0);
    auto engine = make_gpu_engine(o, World(), L, {}, nullptr);
    INFO(precision);
    CHECK(engine->info().device_bytes == e.persistent_bytes());
  }
}

TEST_CASE("memory estimate: equals the GPU engine's allocations with --fp32-matmul tf32x3", "[gpu][memory]") {
  REQUIRE_GPU();
  const Options o = parse_args(
      {"--model", "vit_micro", "--batch-size", "3", "--no-ddp", "--fp32-matmul", "tf32x3", "--attention", "custom"});
  const ParamLayout L = make_param_layout(vit_config(o.model));
  const MemoryEstimate e = estimate_gpu_memory(o, L, {});
  CHECK(e.bytes_of("3xTF32 operand split") == gpu_vit_tf32x3_scratch_bytes(L.cfg, 3));
  CHECK(e.bytes_of("3xTF32 operand split") > 0);
  auto engine = make_gpu_engine(o, World(), L, {}, nullptr);
  CHECK(engine->info().device_bytes == e.persistent_bytes());
}

TEST_CASE("memory estimate: GpuViT allocates its arena plan plus the workspace", "[gpu][memory]") {
  REQUIRE_GPU();
  Stream st;
  const ParamLayout L = make_param_layout(vit_config("vit_tiny"));
  for (Precision p : {Precision::fp32, Precision::tf32, Precision::bf16})
    for (const bool recompute_gelu : {false, true}) {
      GpuViTOptions opt = GpuViTOptions::for_precision(p);
      opt.recompute_gelu = recompute_gelu;
      GpuViT gpu(L, 5, st.s, opt);
      CHECK(gpu.device_bytes() == plan_gpu_vit_arena(L.cfg, L.total, 5, p, false, AttentionImpl::custom,
                                                     PatchEmbedImpl::gemm, recompute_gelu).total_bytes +
                                      GpuViT::workspace_bytes(opt));
    }
}
