#!/usr/bin/env bash
# Issue "[4 of 8] Speed", session 8, job h (2 x H200), the build of this commit (attention on TF32
# tensor cores in --precision tf32; reducer review fixes): gpu_tests "[attention]"; 1 GPU tf32 and
# bf16, interleaved with the build before (vitddp_base, 11cc234); 2 GPUs tf32 and bf16 copy-engine;
# every GPU test. Into $OUT/$JOB.tgz.
#   carry/bins.tar.xz: vitddp, vitddp_base, gpu_tests, gpu_mpi_tests (stripped).
set -u -o pipefail
JOB=${JOB:-s8h}
source results/commands/lib_ab.sh
{
  carry/vitddp --version; carry/vitddp_base --version
  ab_tests_subset "[attention]"
  grep "attention tf32" "$W/gpu_tests.log"
  for r in 1 2; do
    ab tf32-base-r$r 1 tf32 vitddp_base
    ab tf32-new-r$r 1 tf32 vitddp
  done
  ab bf16-base 1 bf16 vitddp_base
  ab bf16-new 1 bf16 vitddp
  ab ce2-tf32-new 2 tf32 vitddp --allreduce copy-engine
  ab ce2-bf16-new 2 bf16 vitddp --allreduce copy-engine
  ab_tests
} 2>&1 | tee "$W/log.txt"
ab_finish
