#!/usr/bin/env bash
# Issue "[4 of 8] Speed", session 5, job f: around 128 threads with unrolled loads, the best cell of
# job e (device_session5_e.sh, same build and switches). Each run twice.
set -u -o pipefail
W=/tmp/s5f; rm -rf $W
source results/commands/lib_experiment_runs.sh
{
  echo "== sum kernel tests: 128 threads with unroll, unroll2, unroll8; 64 threads with unroll"
  for u in unroll unroll2 unroll8; do
    VITDDP_EXP_SUM_THREADS=128 VITDDP_EXP_SUM=$u timeout 60 carry/gpu_tests_exp "[ce_reduce]" 2>&1 | tail -2
  done
  VITDDP_EXP_SUM_THREADS=64 VITDDP_EXP_SUM=unroll timeout 60 carry/gpu_tests_exp "[ce_reduce]" 2>&1 | tail -2
  for rep in 1 2; do
    p=bf16
    exp_run $p-np1-r$rep 1 $p X=0
    exp_run $p-ce-r$rep 2 $p X=0 -- $CE
    exp_run $p-ce-t128-r$rep 2 $p VITDDP_EXP_SUM_THREADS=128 -- $CE
    exp_run $p-ce-t128u-r$rep 2 $p VITDDP_EXP_SUM_THREADS=128 VITDDP_EXP_SUM=unroll -- $CE
    exp_run $p-ce-t256u-r$rep 2 $p VITDDP_EXP_SUM_THREADS=256 VITDDP_EXP_SUM=unroll -- $CE
    exp_run $p-ce-t64u-r$rep 2 $p VITDDP_EXP_SUM_THREADS=64 VITDDP_EXP_SUM=unroll -- $CE
    exp_run $p-ce-t128u2-r$rep 2 $p VITDDP_EXP_SUM_THREADS=128 VITDDP_EXP_SUM=unroll2 VITDDP_EXP_SUM_VPT=2 -- $CE
    exp_run $p-ce-t128u8-r$rep 2 $p VITDDP_EXP_SUM_THREADS=128 VITDDP_EXP_SUM=unroll8 VITDDP_EXP_SUM_VPT=8 -- $CE
    p=tf32
    exp_run $p-np1-r$rep 1 $p X=0
    exp_run $p-ce-r$rep 2 $p X=0 -- $CE
    exp_run $p-ce-t128u-r$rep 2 $p VITDDP_EXP_SUM_THREADS=128 VITDDP_EXP_SUM=unroll -- $CE
    exp_run $p-ce-t64u-r$rep 2 $p VITDDP_EXP_SUM_THREADS=64 VITDDP_EXP_SUM=unroll -- $CE
  done
  exp_tables bf16 tf32
} 2>&1 | tee "$W/log.txt"
tar czf $OUT/s5f.tgz -C /tmp s5f
