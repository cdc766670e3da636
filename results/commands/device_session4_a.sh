#!/usr/bin/env bash
# Session 4, first check on 2 x H200: the copy-engine all-reduce (--allreduce copy-engine) tests,
# then 1-GPU and 2-GPU figures with NCCL and with the copy engines (sweep_sm_carveout.sh), then
# the whole GPU test suites (the build's GPU-side changes since the last device run).
# Output tarred into $OUT.
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
W=/tmp/s4a; rm -rf $W; mkdir -p $W/sweep
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $W/gpu.txt
timeout 60 mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -np 2 carry/gpu_mpi_tests "[ce_allreduce]" > $W/ce_tests.log 2>&1
echo "ce tests exit $?" >> $W/ce_tests.log; tail -n 4 $W/ce_tests.log
SPECS=${SPECS:-"bf16:none:1:0:0 bf16:none:2:0:0 bf16:none:2:0:0:--allreduce,copy-engine bf16:bf16:2:0:0:--allreduce,copy-engine
tf32:none:1:0:0 tf32:none:2:0:0:--allreduce,copy-engine"} \
  OUT=$W/sweep timeout 200 bash results/commands/sweep_sm_carveout.sh > $W/sweep/stdout.txt 2>&1
grep -E "^\||rror" $W/sweep/stdout.txt
timeout 200 carry/gpu_tests > $W/gpu_tests.log 2>&1; echo "gpu_tests exit $?" >> $W/gpu_tests.log
timeout 90 mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -np 2 carry/gpu_mpi_tests > $W/gpu_mpi.log 2>&1; echo "gpu_mpi_tests exit $?" >> $W/gpu_mpi.log
tail -n 3 $W/gpu_tests.log; tail -n 3 $W/gpu_mpi.log
tar czf $OUT/s4a.tgz -C /tmp s4a
