#!/usr/bin/env bash
# Issue "[4 of 8] Speed", session 5, job c: the copy-engine all-reduce pipelined over three streams.
# EXPERIMENT build (carry/vitddp_exp, carry/gpu_mpi_tests_exp: results/2026-11-30-issue5-scheduling-2xH200/
# patches/pipeline_prio_unroll.patch): with VITDDP_EXP_PIPE=1 the reducer runs each bucket's (cast and)
# reduce-scatter copies on the comm stream, its sum kernel and all-gather copies on a second stream,
# and (16-bit) the wait for the peers' chunks and the cast back on a third; fp32 buckets' peers'
# chunks are waited for after the last bucket. Job a showed the comm stream busy from backward's
# start to past its end, one bucket at a time. This job's fp32-gradient runs failed (a capture
# error, fixed for job d); its 16-bit rows stand. Each run twice.
set -u -o pipefail
W=/tmp/s5c; rm -rf $W
source results/commands/lib_experiment_runs.sh
{
  exp_mpi_tests VITDDP_EXP_PIPE "" 1
  for rep in 1 2; do
    for p in bf16 tf32; do
      exp_run $p-np1-r$rep 1 $p X=0
      exp_run $p-ce-r$rep 2 $p X=0 -- $CE
      exp_run $p-ce-pipe-r$rep 2 $p VITDDP_EXP_PIPE=1 -- $CE
      exp_run $p-ce-pipeu-r$rep 2 $p VITDDP_EXP_PIPE=1 VITDDP_EXP_SUM=unroll -- $CE
      exp_run $p-ce-pipe-cap10-r$rep 2 $p VITDDP_EXP_PIPE=1 -- $CE --bucket-cap-mb 10
      exp_run $p-ce-pipe-cap50-r$rep 2 $p VITDDP_EXP_PIPE=1 -- $CE --bucket-cap-mb 50
      exp_run $p-cebf16-r$rep 2 $p X=0 -- $CE --compression bf16
      exp_run $p-cebf16-pipe-r$rep 2 $p VITDDP_EXP_PIPE=1 -- $CE --compression bf16
    done
  done
  exp_run fp32-np1-r1 1 fp32 X=0
  exp_run fp32-ce-r1 2 fp32 X=0 -- $CE
  exp_run fp32-ce-pipe-r1 2 fp32 VITDDP_EXP_PIPE=1 -- $CE
  exp_run fp32-cebf16-r1 2 fp32 X=0 -- $CE --compression bf16
  exp_run fp32-cebf16-pipe-r1 2 fp32 VITDDP_EXP_PIPE=1 -- $CE --compression bf16
  exp_tables bf16 tf32 fp32
  echo; echo "== losses: pipelined against the single-stream copy engine (and the repeats against each other)"
  pairs=("$W/d-bf16-ce-r1.h5" "$W/d-bf16-ce-r2.h5" "$W/d-tf32-ce-r1.h5" "$W/d-tf32-ce-r2.h5")
  for p in bf16 tf32 fp32; do
    for rep in 1 2; do
      for c in ce cebf16; do pairs+=("$W/d-$p-$c-r$rep.h5" "$W/d-$p-$c-pipe-r$rep.h5"); done
    done
  done
  python3 results/compare_losses.py "${pairs[@]}"
} 2>&1 | tee "$W/log.txt"
tar czf $OUT/s5c.tgz -C /tmp s5c
