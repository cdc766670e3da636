#!/usr/bin/env bash
# Issue 3 on the 2 x H200 machine: the article's table on NVLink, SHM and NET, fp32, ViT-L/32,
# batch 32 per GPU. Usage: device_issue3.sh TRANSPORT... (nvlink shm net) [--tests]
# Run from the repository root with the binaries in carry/, $OUT set. Writes one tar of HDF5
# files and one log per transport to $OUT.
set -u
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
BIN=carry/vitddp
for arg in "$@"; do
  if [ "$arg" = "--tests" ]; then
    { carry/gpu_tests; mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -np 2 carry/gpu_mpi_tests; } > $OUT/tests.log 2>&1
    echo "tests exit $?"; grep -E "passed|failed|FAILED" $OUT/tests.log | sort | uniq -c
    continue
  fi
  case $arg in
    nvlink) ENV=""; W=5; S=10 ;;
    shm) ENV="-x NCCL_P2P_DISABLE=1"; W=5; S=10 ;;
    net) ENV="-x NCCL_P2P_DISABLE=1 -x NCCL_SHM_DISABLE=1"; W=3; S=5 ;;
  esac
  D=$OUT/$arg; mkdir -p $D
  MPI="mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 $ENV"
  run() {  # run NAME NP ARGS...
    local name=$1 np=$2; shift 2
    $MPI -np $np $BIN --warmup-steps $W --steps $S --progress-every 100 --out $D/$name.h5 "$@" > $D/$name.log 2>&1
    echo "$arg $name: exit $? $(grep -o '[0-9.]* steps/s per rank' $D/$name.log) $(grep -o 'NCCL transport: .*' $D/$name.log)"
  }
  if [ $arg = nvlink ]; then
    run noddp 1 --no-ddp
    run ddp1 1 --bucket-cap-mb 2000
  fi
  run b2000-copy 2 --bucket-cap-mb 2000 --grad-as-bucket-view off
  run b2000-powersgd 2 --bucket-cap-mb 2000 --compression powersgd --powersgd-start-step 2
  for mb in 1 5 25 100 500 2000; do
    run b$mb 2 --bucket-cap-mb $mb
    run b$mb-bf16 2 --bucket-cap-mb $mb --compression bf16
  done
  run b25-fp16 2 --bucket-cap-mb 25 --compression fp16
  run b25-powersgd 2 --bucket-cap-mb 25 --compression powersgd --powersgd-start-step 2
  run b25-nooverlap 2 --bucket-cap-mb 25 --no-overlap
  tar -C $OUT -cf $OUT/issue3-$arg.tar $arg && rm -rf $D
done
