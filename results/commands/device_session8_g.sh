#!/usr/bin/env bash
# Issue "[4 of 8] Speed", session 8, job g (2 x H200): experiment, the copy-engine all-reduce with
# every copy on one comm stream and the sums on a second (VITDDP_EXP_CE_PIPE=1 --comm-streams 2:
# bucket b's all-gather is enqueued after bucket b+1's reduce-scatter), against 1 stream and the
# alternating 2 streams, bf16 without compression, 2 rounds; gpu_mpi_tests with the experiment on
# (every copy-engine reducer test with 2 streams and fp32 payloads runs it). Into $OUT/$JOB.tgz.
set -u -o pipefail
JOB=${JOB:-s8g}
source results/commands/lib_ab.sh
{
  carry/vitddp --version
  echo "== gpu_mpi_tests, VITDDP_EXP_CE_PIPE=1"
  VITDDP_EXP_CE_PIPE=1 timeout 200 mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -x VITDDP_EXP_CE_PIPE -np 2 \
    carry/gpu_mpi_tests > "$W/gpu_mpi_tests.log" 2>&1
  echo "gpu_mpi_tests exit $?"; grep -a "assertions\|FAILED\|failed" "$W/gpu_mpi_tests.log" | head -20
  for r in 1 2; do
    ab bf16-1gpu-r$r 1 bf16 vitddp
    ab ce-s1-r$r 2 bf16 vitddp --allreduce copy-engine --comm-streams 1
    ab ce-s2-r$r 2 bf16 vitddp --allreduce copy-engine --comm-streams 2
    VITDDP_EXP_CE_PIPE=1 ab ce-pipe-r$r 2 bf16 vitddp --allreduce copy-engine --comm-streams 2
  done
  VITDDP_EXP_CE_PIPE=1 ab tf32-ce-pipe 2 tf32 vitddp --allreduce copy-engine --comm-streams 2
  ab tf32-ce-s1 2 tf32 vitddp --allreduce copy-engine --comm-streams 1
  ab tf32-1gpu 1 tf32 vitddp
} 2>&1 | tee "$W/log.txt"
ab_finish
