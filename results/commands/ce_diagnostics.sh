#!/usr/bin/env bash
# Issue "[4 of 8] Speed", session 4: where the copy-engine all-reduce's remaining cost comes from.
# Runs an EXPERIMENT build (carry/vitddp_exp: the build of this commit plus two environment
# switches that are not in the repository: VITDDP_EXP_CE_SKIP=sum|copies leaves out the sum
# kernel or the data copies (flags and waits stay; results are wrong, timing only) and
# VITDDP_EXP_COMM_PRIO=low puts the comm stream at low priority) next to the 1-GPU figure.
# vitddp ViT-L/32 batch 32, data on the GPU, 10 warm-up + 20 timed steps, each run twice.
# Session 5 found the lowprio row measures nothing: a graph instantiated without
# cudaGraphInstantiateFlagUseNodePriority runs every kernel at the launch stream's priority
# (results/2026-11-30-issue5-scheduling-2xH200/README.md).
set -u -o pipefail
W=$OUT PREFIX=diag
source results/commands/lib_experiment_runs.sh
{
  for rep in 1 2; do
    for p in bf16 tf32; do
      exp_run $p-np1-r$rep 1 $p X=0
      exp_run $p-nccl-r$rep 2 $p X=0
      exp_run $p-ce-r$rep 2 $p X=0 -- $CE
      exp_run $p-ce-nosum-r$rep 2 $p VITDDP_EXP_CE_SKIP=sum -- $CE
      exp_run $p-ce-nocopies-r$rep 2 $p VITDDP_EXP_CE_SKIP=copies -- $CE
      exp_run $p-ce-lowprio-r$rep 2 $p VITDDP_EXP_COMM_PRIO=low -- $CE
    done
  done
  exp_tables bf16 tf32
} 2>&1 | tee "$OUT/ce_diagnostics.log"
