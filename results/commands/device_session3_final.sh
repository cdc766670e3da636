#!/usr/bin/env bash
# Session 3, check of the final build on 2 x H200: the GPU test suites, then vitddp's 1-GPU
# (--no-ddp) and 2-GPU figures per precision with default settings (and bf16 compression) through
# sweep_sm_carveout.sh. Output tarred into $OUT (the tool returns few files).
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
W=/tmp/s3final; rm -rf $W; mkdir -p $W/sweep
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $W/gpu.txt
timeout 240 carry/gpu_tests > $W/gpu_tests.log 2>&1; echo "gpu_tests exit $?" >> $W/gpu_tests.log
timeout 90 mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -np 2 carry/gpu_mpi_tests > $W/gpu_mpi.log 2>&1; echo "gpu_mpi_tests exit $?" >> $W/gpu_mpi.log
SPECS="bf16:none:1:0:0 bf16:none:2:0:0 bf16:bf16:2:0:0 tf32:none:1:0:0 tf32:none:2:0:0 tf32:bf16:2:0:0 fp32:none:1:0:0 fp32:none:2:0:0" \
  OUT=$W/sweep timeout 300 bash results/commands/sweep_sm_carveout.sh > $W/sweep/stdout.txt 2>&1
tail -n 3 $W/gpu_tests.log; tail -n 3 $W/gpu_mpi.log; grep "^|" $W/sweep/stdout.txt
tar czf $OUT/s3final.tgz -C /tmp s3final
