#!/usr/bin/env bash
# Issue "[4 of 8] Speed", session 6, job c (2 x H200): every 2-GPU cell of the target
# (fp32, tf32, bf16; without and with --compression bf16) with the copy-engine all-reduce at
# --bucket-cap-mb 25 (the default) and 50, two repeats, each next to the 1-GPU figure of its
# precision (this build, carry/vitddp).
set -u -o pipefail
W=/tmp/s6c; rm -rf $W
BIN=carry/vitddp
source results/commands/lib_experiment_runs.sh
{
  for rep in 1 2; do
    for p in bf16 tf32 fp32; do
      exp_run $p-np1-r$rep 1 $p X=0
      for c in none bf16; do
        for mb in 25 50; do exp_run $p-ce-$c-${mb}mb-r$rep 2 $p X=0 -- $CE --compression $c --bucket-cap-mb $mb; done
      done
    done
  done
  exp_tables bf16 tf32 fp32
} 2>&1 | tee "$W/log.txt"
tar czf $OUT/s6c.tgz -C /tmp s6c
