#!/usr/bin/env bash
# Issue "[4 of 8] Speed", session 5, job b: the copy-engine all-reduce's sum kernel on the compute
# stream. EXPERIMENT build (carry/vitddp_exp, carry/gpu_mpi_tests_exp): CopyEngineAllReduce split
# into scatter / reduce / gather; with VITDDP_EXP_SUM_ON_COMPUTE=L the reducer runs a bucket's
# reduce-scatter copies on the comm stream at once, its sum kernel on the compute stream L buckets
# later (between backward's kernels, not beside them), then its all-gather on the comm stream
# (described in results/2026-11-30-issue5-scheduling-2xH200/README.md; the code was replaced by job c's).
# VITDDP_EXP_SUM=unroll: the sum kernel issuing 4 vectors' loads first. Each run twice.
set -u -o pipefail
W=/tmp/s5b; rm -rf $W
source results/commands/lib_experiment_runs.sh
{
  exp_mpi_tests VITDDP_EXP_SUM_ON_COMPUTE "" 1 2
  for rep in 1 2; do
    for p in bf16 tf32; do
      exp_run $p-np1-r$rep 1 $p X=0
      exp_run $p-ce-r$rep 2 $p X=0 -- $CE
      for lag in 1 2 4; do exp_run $p-ce-lag$lag-r$rep 2 $p VITDDP_EXP_SUM_ON_COMPUTE=$lag -- $CE; done
      exp_run $p-ce-lag2u-r$rep 2 $p VITDDP_EXP_SUM_ON_COMPUTE=2 VITDDP_EXP_SUM=unroll -- $CE
    done
  done
  exp_run fp32-np1-r1 1 fp32 X=0
  exp_run fp32-ce-r1 2 fp32 X=0 -- $CE
  exp_run fp32-ce-lag2-r1 2 fp32 VITDDP_EXP_SUM_ON_COMPUTE=2 -- $CE
  exp_tables bf16 tf32 fp32
  echo; echo "== losses against the comm-stream sum"
  pairs=()
  for ref in "$W"/d-*-ce-r*.h5; do
    for other in $(ls "${ref/-ce-r/-ce-lag*-r}" 2>/dev/null); do pairs+=("$ref" "$other"); done
  done
  python3 results/compare_losses.py "${pairs[@]}"
} 2>&1 | tee "$W/log.txt"
tar czf $OUT/s5b.tgz -C /tmp s5b
