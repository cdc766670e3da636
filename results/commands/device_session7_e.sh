#!/usr/bin/env bash
# Issue "[4 of 8] Speed", session 7, job e (2 x H200): LayerNorm forward and backward with one warp
# per row for D = 128 x V, V <= 8 (cuda/layernorm_warp.cuh), against the block-per-row kernels
# (build b6e88d9).
#  1. gpu_tests "[layernorm],[gelu],[gpu_vit]" of the new build; 2. bench_gpu_ops of both builds;
#  3. A/B, interleaved: 1 GPU bf16 3 rounds, tf32 2 rounds; 2 GPUs bf16 copy-engine 1 round.
#   carry/bins.tar.xz: vitddp, gpu_tests (new), vitddp_base, gpu_tests_base.
set -u -o pipefail
JOB=${JOB:-s7e}
source results/commands/lib_ab.sh
{
  carry/vitddp --version
  ab_tests_subset "[layernorm],[gelu],[gpu_vit]"
  ab_bench gpu_tests_base gpu_tests
  ab_rounds 3 2
  ab bf16-np2-base-r1 2 bf16 vitddp_base --allreduce copy-engine
  ab bf16-np2-new-r1 2 bf16 vitddp --allreduce copy-engine
} 2>&1 | tee "$W/log.txt"
ab_finish
