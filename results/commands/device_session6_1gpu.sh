#!/usr/bin/env bash
# Issue "[4 of 8] Speed", session 6, on 1 x H200 (the only kind lent at the time): every
# single-GPU test of this build, then the speed benchmark's 1-GPU part against PyTorch
# (bench_speed.sh; the 2-GPU part needs two GPUs and is skipped by it).
#   carry/bins.tar.xz: vitddp, gpu_tests (stripped; other binaries in it are not used here).
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
W=/tmp/s6one; rm -rf $W; mkdir -p $W/bench
[ -f carry/bins.tar.xz ] && tar xJf carry/bins.tar.xz -C carry
{
  echo "== gpu_tests"
  timeout 300 carry/gpu_tests > $W/gpu_tests.log 2>&1
  echo "gpu_tests exit $?"; tail -3 $W/gpu_tests.log
  echo "== bench_speed.sh (1 GPU)"
  OUT=$W/bench timeout 420 bash results/commands/bench_speed.sh
} 2>&1 | tee $W/log.txt
for f in $W/bench/*.h5; do h5repack -f SHUF -f GZIP=4 "$f" "$f.z" 2>/dev/null && mv "$f.z" "$f"; done
tar czf $OUT/s6one.tgz -C /tmp s6one
