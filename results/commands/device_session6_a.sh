#!/usr/bin/env bash
# Issue "[4 of 8] Speed", session 6, job a (2 x H200): the 16-bit compression hooks with their
# casts fused into the copy-engine all-reduce (CopyEngineAllReduce::all_reduce_16bit), against the
# build before it (carry/vitddp_before, 60035e2), alternating, two repeats, each next to the 1-GPU
# figure of its precision; gpu_mpi_tests on two GPUs and gpu_tests "[ce_reduce],[attention]" (the
# tests changed after the whole of gpu_tests ran on 1 GPU at 802c737).
#   carry/bins.tar.xz: vitddp, vitddp_before, gpu_tests, gpu_mpi_tests (stripped).
set -u -o pipefail
W=/tmp/s6a; rm -rf $W
BIN=carry/vitddp
source results/commands/lib_experiment_runs.sh
{
  echo "== gpu_tests"
  timeout 300 carry/gpu_tests "[ce_reduce],[attention]" > $W/gpu_tests.log 2>&1
  echo "gpu_tests exit $?"; tail -3 $W/gpu_tests.log
  echo "== gpu_mpi_tests"
  timeout 200 mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -np 2 carry/gpu_mpi_tests > $W/gpu_mpi_tests.log 2>&1
  echo "gpu_mpi_tests exit $?"; tail -3 $W/gpu_mpi_tests.log
  for rep in 1 2; do
    for p in bf16 tf32; do
      exp_run $p-np1-r$rep 1 $p X=0
      exp_run $p-ce-r$rep 2 $p X=0 -- $CE
      BIN=carry/vitddp_before exp_run $p-cebf16-before-r$rep 2 $p X=0 -- $CE --compression bf16
      exp_run $p-cebf16-fused-r$rep 2 $p X=0 -- $CE --compression bf16
    done
  done
  exp_run fp32-np1-r1 1 fp32 X=0
  exp_run fp32-cebf16-fused-r1 2 fp32 X=0 -- $CE --compression bf16
  exp_tables bf16 tf32 fp32
  echo; echo "== losses: fused against before"
  pairs=()
  for f in "$W"/d-*-cebf16-fused-r*.h5; do
    b=${f/-fused-/-before-}; [ -f "$b" ] && pairs+=("$b" "$f")
  done
  python3 results/compare_losses.py "${pairs[@]}"
} 2>&1 | tee "$W/log.txt"
tar czf $OUT/s6a.tgz -C /tmp s6a
