#!/usr/bin/env bash
# Issue "[4 of 8] Speed", session 7, job c (2 x H200): the speed benchmark (bench_speed.sh: vitddp
# and PyTorch alternating per precision on 1 GPU, ncu per-kernel tables of one bf16 and one tf32
# step, the 2-GPU runs) of the build of this commit, into $OUT/s7c.tgz.
#   carry/bins.tar.xz: vitddp (stripped).
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
W=/tmp/s7c; rm -rf $W; mkdir -p $W/bench
[ -f carry/bins.tar.xz ] && tar xJf carry/bins.tar.xz -C carry
carry/vitddp --version | tee $W/version.txt
OUT=$W/bench NCU_PRECISIONS="bf16 tf32" timeout 560 bash results/commands/bench_speed.sh
for f in $W/bench/*.h5; do h5repack -f SHUF -f GZIP=4 "$f" "$f.z" 2>/dev/null && mv "$f.z" "$f"; done
tar czf $OUT/s7c.tgz -C /tmp s7c
