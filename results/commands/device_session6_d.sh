#!/usr/bin/env bash
# Issue "[4 of 8] Speed", session 6, job d (2 x H200): cache hints in the copy-engine sum kernel.
# EXPERIMENT build (carry/vitddp_exp.xz: ce_sum_chunk's fp32/16-bit vector loop with
# VITDDP_EXP_HINT=0 as committed, 1: loads with __ldcs (evict-first, the chunk and the peers'
# copies are read once), 2: also the stores with __stcs), so that the sums push fewer of the GEMMs'
# operands out of L2. bf16 and tf32, uncompressed, 25 MiB buckets, three repeats alternating, each
# next to the 1-GPU figure of its precision. The switch was not kept; the __ldcs loads were (d5ce39a).
set -u -o pipefail
W=/tmp/s6d; rm -rf $W
[ -f carry/vitddp_exp.xz ] && xz -dc carry/vitddp_exp.xz > carry/vitddp_exp && chmod +x carry/vitddp_exp
BIN=carry/vitddp_exp
source results/commands/lib_experiment_runs.sh
{
  for rep in 1 2 3; do
    for p in bf16 tf32; do
      exp_run $p-np1-r$rep 1 $p X=0
      for h in 0 1 2; do exp_run $p-ce-hint$h-r$rep 2 $p VITDDP_EXP_HINT=$h -- $CE; done
    done
  done
  exp_tables bf16 tf32
  for p in bf16 tf32; do
    echo; echo "## $p, repeat 3"
    python3 results/overlap_table.py --baseline "$W/d-$p-np1-r3.h5" $(ls "$W"/d-$p-*-r3.h5 | grep -v np1)
  done
} 2>&1 | tee "$W/log.txt"
tar czf $OUT/s6d.tgz -C /tmp s6d
