#!/usr/bin/env bash
# Session 4, 2 x H200: the copy-engine all-reduce with the 16-byte-vector sum kernel. Its kernel
# test and the intra-node all-reduce tests, then NCCL vs copy-engine per precision with the 1-GPU
# (--no-ddp) figure, twice (sweep_sm_carveout.sh into rep1/ and rep2/). Output tarred into $OUT.
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
W=/tmp/s4d; rm -rf $W; mkdir -p $W/rep1 $W/rep2
timeout 60 carry/gpu_tests "[ce_reduce]" > $W/ce_reduce.log 2>&1; echo "exit $?" >> $W/ce_reduce.log
timeout 90 mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -np 2 carry/gpu_mpi_tests "[ce_allreduce]" > $W/ce_tests.log 2>&1
echo "exit $?" >> $W/ce_tests.log; tail -n 3 $W/ce_reduce.log $W/ce_tests.log
for r in rep1 rep2; do
  SPECS=${SPECS:-"bf16:none:1:0:0 bf16:none:2:0:0 bf16:none:2:0:0:--allreduce,copy-engine bf16:bf16:2:0:0:--allreduce,copy-engine
tf32:none:1:0:0 tf32:none:2:0:0 tf32:none:2:0:0:--allreduce,copy-engine tf32:bf16:2:0:0:--allreduce,copy-engine
fp32:none:1:0:0 fp32:none:2:0:0:--allreduce,copy-engine fp32:bf16:2:0:0:--allreduce,copy-engine"} \
    OUT=$W/$r timeout 250 bash results/commands/sweep_sm_carveout.sh > $W/$r/stdout.txt 2>&1
  grep -E "^\||rror" $W/$r/stdout.txt
done
tar czf $OUT/s4d.tgz -C /tmp s4d
