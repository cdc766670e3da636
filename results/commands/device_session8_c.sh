#!/usr/bin/env bash
# Issue "[4 of 8] Speed", session 8, job c (2 x H200): experiment, the copy-engine all-reduce on two
# comm streams (VITDDP_EXP_CE_STREAMS=2: launch i of a step on stream i mod 2, so one bucket's sum
# and all-gather overlap the next one's reduce-scatter) against one stream, bf16, 2 rounds; the
# reducer and copy-engine GPU tests with two streams. Into $OUT/$JOB.tgz.
#   carry/bins.tar.xz: vitddp, gpu_tests, gpu_mpi_tests (stripped).
set -u -o pipefail
JOB=${JOB:-s8c}
source results/commands/lib_ab.sh
{
  carry/vitddp --version
  for r in 1 2; do
    ab bf16-1gpu-r$r 1 bf16 vitddp
    for c in none bf16; do
      VITDDP_EXP_CE_STREAMS=1 ab ce1-$c-r$r 2 bf16 vitddp --allreduce copy-engine --compression $c
      VITDDP_EXP_CE_STREAMS=2 ab ce2-$c-r$r 2 bf16 vitddp --allreduce copy-engine --compression $c
    done
  done
  echo "== gpu_mpi_tests, two comm streams"
  VITDDP_EXP_CE_STREAMS=2 timeout 200 mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -x VITDDP_EXP_CE_STREAMS -np 2 \
    carry/gpu_mpi_tests > "$W/gpu_mpi_tests.log" 2>&1
  echo "gpu_mpi_tests exit $?"; grep -a "assertions\|FAILED\|failed" "$W/gpu_mpi_tests.log" | head -20
} 2>&1 | tee "$W/log.txt"
ab_finish
