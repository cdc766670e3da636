#!/usr/bin/env bash
# Issue "[4 of 8] Speed", session 6, job b (2 x H200): bucket capacity with the copy-engine
# all-reduce (this build, carry/vitddp): --bucket-cap-mb 25 (the default), 50 and 100, bf16 and
# tf32, uncompressed, two repeats, each next to the 1-GPU figure of its precision.
#   carry/bins.tar.xz: vitddp (stripped; other binaries in it are not used here).
set -u -o pipefail
W=/tmp/s6b; rm -rf $W
BIN=carry/vitddp
source results/commands/lib_experiment_runs.sh
{
  for rep in 1 2; do
    for p in bf16 tf32; do
      exp_run $p-np1-r$rep 1 $p X=0
      for mb in 25 50 100; do exp_run $p-ce-${mb}mb-r$rep 2 $p X=0 -- $CE --bucket-cap-mb $mb; done
    done
  done
  exp_tables bf16 tf32
} 2>&1 | tee "$W/log.txt"
tar czf $OUT/s6b.tgz -C /tmp s6b
