#!/usr/bin/env bash
# Issue "[4 of 8] Speed", session 5, job d: the copy-engine all-reduce pipelined over three streams
# (job c's build with the capture error fixed: the finish stream joins the graph only when a 16-bit
# cast ran on it), the fp32-gradient cells job c lost. VITDDP_EXP_PIPE=1 as in device_session5_c.sh.
# Each run twice.
set -u -o pipefail
W=/tmp/s5d; rm -rf $W
source results/commands/lib_experiment_runs.sh
{
  exp_mpi_tests VITDDP_EXP_PIPE "" 1
  for rep in 1 2; do
    for p in bf16 tf32; do
      exp_run $p-np1-r$rep 1 $p X=0
      exp_run $p-ce-r$rep 2 $p X=0 -- $CE
      exp_run $p-ce-pipe-r$rep 2 $p VITDDP_EXP_PIPE=1 -- $CE
      exp_run $p-ce-pipe-cap10-r$rep 2 $p VITDDP_EXP_PIPE=1 -- $CE --bucket-cap-mb 10
      exp_run $p-ce-pipe-cap50-r$rep 2 $p VITDDP_EXP_PIPE=1 -- $CE --bucket-cap-mb 50
      exp_run $p-ce-pipeu-cap10-r$rep 2 $p VITDDP_EXP_PIPE=1 VITDDP_EXP_SUM=unroll -- $CE --bucket-cap-mb 10
    done
  done
  exp_tables bf16 tf32
  echo; echo "== losses: pipelined against the single-stream copy engine (and the repeats against each other)"
  pairs=("$W/d-bf16-ce-r1.h5" "$W/d-bf16-ce-r2.h5" "$W/d-tf32-ce-r1.h5" "$W/d-tf32-ce-r2.h5")
  for p in bf16 tf32; do
    for rep in 1 2; do pairs+=("$W/d-$p-ce-r$rep.h5" "$W/d-$p-ce-pipe-r$rep.h5"); done
  done
  python3 results/compare_losses.py "${pairs[@]}"
} 2>&1 | tee "$W/log.txt"
tar czf $OUT/s5d.tgz -C /tmp s5d
