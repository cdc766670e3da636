#!/usr/bin/env bash
# Issue "[4 of 8] Speed", session 8, job a (2 x H200): the tensor-core attention kernels
# (cuda/attention_mma.cu) against cuDNN's fused attention, into $OUT/$JOB.tgz:
#   - gpu_tests "[attention]" (the new kernels against host loops in double), the attention benchmark;
#   - 1 GPU bf16, --attention cudnn and custom interleaved, 3 rounds; 2 GPUs copy-engine, both;
#   - every GPU test (gpu_tests on one GPU, gpu_mpi_tests on two).
#   carry/bins.tar.xz: vitddp, gpu_tests, gpu_mpi_tests (stripped).
set -u -o pipefail
JOB=${JOB:-s8a}
source results/commands/lib_ab.sh
{
  carry/vitddp --version
  ab_tests_subset "[attention]"
  echo "== attention benchmark"
  timeout 120 carry/gpu_tests "[attention_bench]" 2>&1 | grep -v "^$" | tail -30
  for r in 1 2 3; do
    ab bf16-cudnn-r$r 1 bf16 vitddp --attention cudnn
    ab bf16-custom-r$r 1 bf16 vitddp --attention custom
  done
  ab ce2-bf16-cudnn 2 bf16 vitddp --attention cudnn --allreduce copy-engine
  ab ce2-bf16-custom 2 bf16 vitddp --attention custom --allreduce copy-engine
  ab_tests
} 2>&1 | tee "$W/log.txt"
ab_finish
