#!/usr/bin/env bash
# Issue "[4 of 8] Speed", session 5, job e: the copy-engine all-reduce's sum kernel launch shape.
# EXPERIMENT build (carry/vitddp_exp, carry/gpu_tests_exp: results/2026-11-30-issue5-scheduling-2xH200/
# patches/sum_launch_shape.patch, switches that are not in the repository):
#   VITDDP_EXP_SUM_CLUSTER=N   thread-block clusters of N (blocks leave a GPC's SMs together, as the
#                              GEMMs' 2-SM clusters need them)
#   VITDDP_EXP_SUM_THREADS=T   threads per block [256]
#   VITDDP_EXP_SUM_VPT=V       16-byte vectors per thread [4]
#   VITDDP_EXP_SUM=unroll      all of a thread's loads issued before its adds (unroll2/unroll8: 2 or 8)
# Each run twice.
set -u -o pipefail
W=/tmp/s5e; rm -rf $W
source results/commands/lib_experiment_runs.sh
{
  echo "== sum kernel tests: clusters of 2, 1024 threads, 1 vector per thread"
  VITDDP_EXP_SUM_CLUSTER=2 timeout 60 carry/gpu_tests_exp "[ce_reduce]" 2>&1 | tail -2
  VITDDP_EXP_SUM_THREADS=1024 timeout 60 carry/gpu_tests_exp "[ce_reduce]" 2>&1 | tail -2
  VITDDP_EXP_SUM_VPT=1 timeout 60 carry/gpu_tests_exp "[ce_reduce]" 2>&1 | tail -2
  for rep in 1 2; do
    p=bf16
    exp_run $p-np1-r$rep 1 $p X=0
    exp_run $p-ce-r$rep 2 $p X=0 -- $CE
    exp_run $p-ce-cl2-r$rep 2 $p VITDDP_EXP_SUM_CLUSTER=2 -- $CE
    exp_run $p-ce-cl4-r$rep 2 $p VITDDP_EXP_SUM_CLUSTER=4 -- $CE
    exp_run $p-ce-t1024-r$rep 2 $p VITDDP_EXP_SUM_THREADS=1024 -- $CE
    exp_run $p-ce-vpt1-r$rep 2 $p VITDDP_EXP_SUM_VPT=1 -- $CE
    exp_run $p-ce-vpt16-r$rep 2 $p VITDDP_EXP_SUM_VPT=16 -- $CE
    exp_run $p-ce-t128u-r$rep 2 $p VITDDP_EXP_SUM_THREADS=128 VITDDP_EXP_SUM=unroll -- $CE
    p=tf32
    exp_run $p-np1-r$rep 1 $p X=0
    exp_run $p-ce-r$rep 2 $p X=0 -- $CE
    exp_run $p-ce-cl2-r$rep 2 $p VITDDP_EXP_SUM_CLUSTER=2 -- $CE
    exp_run $p-ce-vpt1-r$rep 2 $p VITDDP_EXP_SUM_VPT=1 -- $CE
  done
  exp_tables bf16 tf32
} 2>&1 | tee "$W/log.txt"
tar czf $OUT/s5e.tgz -C /tmp s5e
