#!/usr/bin/env bash
# Issue "[4 of 8] Speed", session 7, job a (2 x H200): the vectorized LayerNorm kernels (branch
# ln-vec, cuda/layernorm.cu) against the build without them (HEAD 0b78608).
#  1. every GPU test of the new build: gpu_tests on one GPU, gpu_mpi_tests on two;
#  2. bench_gpu_ops ("bench: per-operation times...") of both builds;
#  3. A/B, interleaved: 1 GPU bf16 and tf32, 3 rounds of 100 timed steps; 2 GPUs bf16 copy-engine,
#     2 rounds.
# (Moved onto lib_ab.sh after it ran; the commands are the same.)
#   carry/bins.tar.xz: vitddp, gpu_tests, gpu_mpi_tests (new), vitddp_base, gpu_tests_base.
set -u -o pipefail
JOB=${JOB:-s7a}
source results/commands/lib_ab.sh
{
  carry/vitddp --version
  ab_tests
  ab_bench gpu_tests_base gpu_tests
  for r in 1 2 3; do
    for p in bf16 tf32; do
      ab $p-base-r$r 1 $p vitddp_base
      ab $p-lnvec-r$r 1 $p vitddp
    done
  done
  for r in 1 2; do
    ab bf16-np2-base-r$r 2 bf16 vitddp_base --allreduce copy-engine
    ab bf16-np2-lnvec-r$r 2 bf16 vitddp --allreduce copy-engine
  done
} 2>&1 | tee "$W/log.txt"
ab_finish
