#!/usr/bin/env bash
# Issue "[4 of 8] Speed", session 8, job d (2 x H200): experiment, the copy-engine all-reduce on 1, 2,
# 3 or 4 comm streams (VITDDP_EXP_CE_STREAMS) in bf16 and tf32, with and without bf16 compression,
# next to the 1-GPU figure of each precision. Into $OUT/$JOB.tgz.
#   carry/bins.tar.xz: vitddp (stripped), the build of job c.
set -u -o pipefail
JOB=${JOB:-s8d}
source results/commands/lib_ab.sh
{
  carry/vitddp --version
  for p in bf16 tf32; do
    ab $p-1gpu 1 $p vitddp
    for k in 1 2 3 4; do
      VITDDP_EXP_CE_STREAMS=$k ab $p-ce$k-none 2 $p vitddp --allreduce copy-engine
    done
    for k in 1 2 3; do
      VITDDP_EXP_CE_STREAMS=$k ab $p-ce$k-bf16 2 $p vitddp --allreduce copy-engine --compression bf16
    done
  done
  ab fp32-1gpu 1 fp32 vitddp
  for k in 1 2; do VITDDP_EXP_CE_STREAMS=$k ab fp32-ce$k-none 2 fp32 vitddp --allreduce copy-engine; done
} 2>&1 | tee "$W/log.txt"
ab_finish
