#!/usr/bin/env bash
# Session 4, final build on 2 x H200: the GPU test suites, then the speed benchmark
# (bench_speed.sh: 1 GPU against PyTorch in one job, ncu table of a bf16 step, 2 GPUs with NCCL
# and with --allreduce copy-engine). Output tarred into $OUT.
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
W=/tmp/s4f; rm -rf $W; mkdir -p $W/bench
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $W/gpu.txt
timeout 200 carry/gpu_tests > $W/gpu_tests.log 2>&1; echo "gpu_tests exit $?" >> $W/gpu_tests.log
timeout 90 mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -np 2 carry/gpu_mpi_tests > $W/gpu_mpi.log 2>&1; echo "gpu_mpi_tests exit $?" >> $W/gpu_mpi.log
tail -n 3 $W/gpu_tests.log $W/gpu_mpi.log
OUT=$W/bench timeout 400 bash results/commands/bench_speed.sh > $W/bench/stdout.txt 2>&1
grep -E "^\||^#|Kernels|FAILED" $W/bench/stdout.txt | head -60
tar czf $OUT/s4f.tgz -C /tmp s4f
