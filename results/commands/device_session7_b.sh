#!/usr/bin/env bash
# Issue "[4 of 8] Speed", session 7, job b (2 x H200): bias gradients of fc2/out_proj taken by the
# LayerNorm backward and fc1's by the GELU backward (no BGRADB epilogue on those three weight
# GEMMs) against the build without that change (421b31f).
#  1. every GPU test of the new build; 2. bench_gpu_ops of both builds;
#  3. A/B, interleaved: 1 GPU bf16 and tf32, 3 rounds, fp32 1 round; 2 GPUs copy-engine bf16
#     2 rounds, tf32 1 round.
#   carry/bins.tar.xz: vitddp, gpu_tests, gpu_mpi_tests (new), vitddp_base, gpu_tests_base.
set -u -o pipefail
JOB=${JOB:-s7b}
source results/commands/lib_ab.sh
{
  carry/vitddp --version
  ab_tests
  ab_bench gpu_tests_base gpu_tests
  ab_rounds 3 3
  ab fp32-base-r1 1 fp32 vitddp_base
  ab fp32-new-r1 1 fp32 vitddp
  for r in 1 2; do
    ab bf16-np2-base-r$r 2 bf16 vitddp_base --allreduce copy-engine
    ab bf16-np2-new-r$r 2 bf16 vitddp --allreduce copy-engine
  done
  ab tf32-np2-base-r1 2 tf32 vitddp_base --allreduce copy-engine
  ab tf32-np2-new-r1 2 tf32 vitddp --allreduce copy-engine
} 2>&1 | tee "$W/log.txt"
ab_finish
