#!/usr/bin/env bash
# Issue "[4 of 8] Speed", session 5, job a: can the copy-engine all-reduce's sum kernel stay out of
# backward's way by priority or by a different kernel? EXPERIMENT build (carry/vitddp_exp,
# carry/gpu_tests_exp: 5778421 plus the priority and unroll parts of
# results/2026-11-30-issue5-scheduling-2xH200/patches/pipeline_prio_unroll.patch, switches that are
# not in the repository):
#   VITDDP_EXP_NODE_PRIO=1        instantiate the step graph with cudaGraphInstantiateFlagUseNodePriority
#                                 (without it a graph runs every kernel at the launch stream's priority)
#   VITDDP_EXP_COMPUTE_PRIO=high  compute stream at the highest priority (default: lowest)
#   VITDDP_EXP_COMM_PRIO=low      comm stream at the lowest priority (default: highest)
#   VITDDP_EXP_SUM=unroll         sum kernel issuing all 4 vectors' loads before adding
#   VITDDP_EXP_SUM_BLOCKS=N       cap the sum kernel's grid at N blocks (grid-stride)
# Each run twice. Output tarred into $OUT.
set -u -o pipefail
W=/tmp/s5a; rm -rf $W
source results/commands/lib_experiment_runs.sh
PRIO="VITDDP_EXP_NODE_PRIO=1 VITDDP_EXP_COMPUTE_PRIO=high VITDDP_EXP_COMM_PRIO=low"
{
  echo "== sum kernel tests, default and unrolled"
  timeout 60 carry/gpu_tests_exp "[ce_reduce]" 2>&1 | tail -2
  VITDDP_EXP_SUM=unroll timeout 60 carry/gpu_tests_exp "[ce_reduce]" 2>&1 | tail -2
  for rep in 1 2; do
    for p in bf16 tf32; do
      exp_run $p-np1-r$rep 1 $p X=0
      exp_run $p-ce-r$rep 2 $p X=0 -- $CE
      exp_run $p-ce-nodeprio-r$rep 2 $p VITDDP_EXP_NODE_PRIO=1 -- $CE
      exp_run $p-ce-prio-r$rep 2 $p $PRIO -- $CE
      exp_run $p-ce-unroll-r$rep 2 $p VITDDP_EXP_SUM=unroll -- $CE
      exp_run $p-ce-unroll-prio-r$rep 2 $p VITDDP_EXP_SUM=unroll $PRIO -- $CE
      exp_run $p-ce-b32-prio-r$rep 2 $p VITDDP_EXP_SUM=unroll VITDDP_EXP_SUM_BLOCKS=32 $PRIO -- $CE
      exp_run $p-nccl-nodeprio-r$rep 2 $p VITDDP_EXP_NODE_PRIO=1
    done
  done
  exp_tables bf16 tf32
} 2>&1 | tee "$W/log.txt"
tar czf $OUT/s5a.tgz -C /tmp s5a
