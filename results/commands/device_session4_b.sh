#!/usr/bin/env bash
# Session 4, second run on 2 x H200: the intra-node all-reduce tests (copy-engine and
# p2p-kernel), then NCCL / copy-engine / p2p-kernel per precision and copy-engine at other bucket
# caps (sweep_sm_carveout.sh, 1-GPU --no-ddp baselines in the same job). Output tarred into $OUT.
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
W=/tmp/s4b; rm -rf $W; mkdir -p $W/sweep
timeout 90 mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -np 2 carry/gpu_mpi_tests "[ce_allreduce]" > $W/ce_tests.log 2>&1
echo "ce tests exit $?" >> $W/ce_tests.log; tail -n 4 $W/ce_tests.log
SPECS=${SPECS:-"bf16:none:1:0:0 bf16:none:2:0:0 bf16:none:2:0:0:--allreduce,copy-engine bf16:none:2:0:0:--allreduce,p2p-kernel
bf16:bf16:2:0:0:--allreduce,copy-engine bf16:bf16:2:0:0:--allreduce,p2p-kernel
bf16:none:2:0:0:--allreduce,copy-engine,--bucket-cap-mb,10 bf16:none:2:0:0:--allreduce,copy-engine,--bucket-cap-mb,50
bf16:none:2:0:0:--allreduce,p2p-kernel,--bucket-cap-mb,50
tf32:none:1:0:0 tf32:none:2:0:0 tf32:none:2:0:0:--allreduce,copy-engine tf32:none:2:0:0:--allreduce,p2p-kernel
fp32:none:1:0:0 fp32:none:2:0:0 fp32:none:2:0:0:--allreduce,copy-engine fp32:none:2:0:0:--allreduce,p2p-kernel"} \
  OUT=$W/sweep timeout 420 bash results/commands/sweep_sm_carveout.sh > $W/sweep/stdout.txt 2>&1
grep -E "^\||rror" $W/sweep/stdout.txt
tar czf $OUT/s4b.tgz -C /tmp s4b
