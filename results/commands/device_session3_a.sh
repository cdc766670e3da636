#!/usr/bin/env bash
# Session 3, first device call (2 x H200): the GPU test suites of the current build, NCCL's channel
# count on this machine, then the SM-carveout sweep. Output in $OUT (tarred: the tool returns few files).
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
W=/tmp/s3a; rm -rf $W; mkdir -p $W/sweep
git log -1 --format='commit %H' > $W/build.txt 2>/dev/null
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv >> $W/build.txt
timeout 200 carry/gpu_tests > $W/gpu_tests.log 2>&1; echo "gpu_tests exit $?" >> $W/gpu_tests.log
timeout 90 mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -np 2 carry/gpu_mpi_tests > $W/gpu_mpi.log 2>&1; echo "gpu_mpi_tests exit $?" >> $W/gpu_mpi.log
timeout 60 mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -x NCCL_DEBUG=INFO -np 2 carry/vitddp --precision bf16 --data device --warmup-steps 2 --steps 2 --cooldown-steps 0 --out /tmp/nccl_info.h5 --overwrite > $W/nccl_info.log 2>&1
OUT=$W/sweep timeout 330 bash results/commands/sweep_sm_carveout.sh > $W/sweep/stdout.txt 2>&1
tail -3 $W/gpu_tests.log $W/gpu_mpi.log
grep -E "nChannels|channels|Channel 0" $W/nccl_info.log | head -5
tail -45 $W/sweep/sweep_sm_carveout.log
tar czf $OUT/s3a.tgz -C /tmp s3a
