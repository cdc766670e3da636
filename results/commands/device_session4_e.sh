#!/usr/bin/env bash
# Session 4, final build on 2 x H200: the GPU test suites; --allreduce copy-engine with one GPU
# visible per rank (must fail on every rank with a clear error, not hang); the full output of one
# copy-engine run (memory estimate vs allocation); then the speed benchmark (bench_speed.sh,
# 1 GPU against PyTorch, 2 GPUs with NCCL and with the copy engines). Output tarred into $OUT.
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
W=/tmp/s4e; rm -rf $W; mkdir -p $W/bench
timeout 200 carry/gpu_tests > $W/gpu_tests.log 2>&1; echo "gpu_tests exit $?" >> $W/gpu_tests.log
timeout 90 mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -np 2 carry/gpu_mpi_tests > $W/gpu_mpi.log 2>&1; echo "gpu_mpi_tests exit $?" >> $W/gpu_mpi.log
timeout 90 carry/gpu_tests "[attention_bench]" > $W/cudnn_bench.log 2>&1; echo "cudnn_bench exit $?" >> $W/cudnn_bench.log
tail -n 3 $W/gpu_tests.log $W/gpu_mpi.log $W/cudnn_bench.log
timeout 60 mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -np 2 bash -c \
  'CUDA_VISIBLE_DEVICES=$OMPI_COMM_WORLD_LOCAL_RANK exec carry/vitddp --allreduce copy-engine --model vit_b_32 --data device --steps 5 --warmup-steps 1 --cooldown-steps 0 --out /tmp/iso.h5 --overwrite' \
  > $W/isolated.log 2>&1; echo "isolated exit $? (h5 exists: $(test -e /tmp/iso.h5 && echo yes || echo no))" >> $W/isolated.log
tail -n 6 $W/isolated.log
timeout 60 mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -np 2 carry/vitddp --allreduce copy-engine --precision bf16 \
  --data device --warmup-steps 10 --steps 20 --cooldown-steps 0 --out $W/ce-run.h5 > $W/ce-run.log 2>&1
echo "ce run exit $?" >> $W/ce-run.log; grep -iE "warning|memory|timed window|exit" $W/ce-run.log
OUT=$W/bench SKIP_NCU=${SKIP_NCU:-0} timeout 380 bash results/commands/bench_speed.sh > $W/bench/stdout.txt 2>&1
tail -n 40 $W/bench/stdout.txt
tar czf $OUT/s4e.tgz -C /tmp s4e
