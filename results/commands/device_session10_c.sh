#!/usr/bin/env bash
# Session 10, job c: every GPU test after the reducer's comm streams became one list
# (gpu_tests on 1 GPU, gpu_mpi_tests on 2 ranks), then end-to-end runs through each reducer path
# on 2 GPUs (NCCL, NCCL + bf16 compression, PowerSGD, copy-engine on 1 and 2 comm streams, with
# and without bf16 compression, bucket copies): ViT-L/32 batch 32, data on the GPU, 10 warm-up +
# 100 timed steps. Into $OUT/$JOB.tgz: log.txt, the test logs and the HDF5 files.
set -u -o pipefail
: "${JOB:?set JOB}"
source results/commands/lib_ab.sh
{
  carry/vitddp --version
  ab_tests
  ab bf16-solo 1 bf16 vitddp
  ab bf16-nccl 2 bf16 vitddp
  ab bf16-nccl-c16 2 bf16 vitddp --compression bf16
  ab bf16-powersgd 2 bf16 vitddp --compression powersgd --powersgd-start-step 5
  ab bf16-ce 2 bf16 vitddp --allreduce copy-engine
  ab bf16-ce-s1 2 bf16 vitddp --allreduce copy-engine --comm-streams 1
  ab bf16-ce-c16-s2 2 bf16 vitddp --allreduce copy-engine --compression bf16 --comm-streams 2
  ab bf16-ce-copy 2 bf16 vitddp --allreduce copy-engine --grad-as-bucket-view off
  ab tf32-ce 2 tf32 vitddp --allreduce copy-engine
} 2>&1 | tee "$W/log.txt"
ab_finish
