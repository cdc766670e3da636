#!/usr/bin/env bash
# Session 10, job b: --gemm-sm-carveout with the copy-engine all-reduce on 2 GPUs (it was measured
# only against NCCL before). ViT-L/32 batch 32, data on the GPU, 10 warm-up + 300 timed steps,
# each precision's 1-GPU figure (GPU 0 and GPU 1 alone, no carveout) first.
# Into $OUT/$JOB.tgz: log.txt and the HDF5 files.
set -u -o pipefail
: "${JOB:?set JOB}"
source results/commands/lib_ab.sh
COMMON="--data device --warmup-steps 10 --steps 300 --cooldown-steps 0 --progress-every 1000 --overwrite"
{
  carry/vitddp --version
  solo bf16-solo0 0 bf16; solo bf16-solo1 1 bf16
  ab bf16-ce 2 bf16 vitddp --allreduce copy-engine
  for n in 2 4 8 16; do ab bf16-ce-co$n 2 bf16 vitddp --allreduce copy-engine --gemm-sm-carveout $n; done
  ab bf16-ce-again 2 bf16 vitddp --allreduce copy-engine
  ab bf16c-ce 2 bf16 vitddp --allreduce copy-engine --compression bf16
  ab bf16c-ce-co4 2 bf16 vitddp --allreduce copy-engine --compression bf16 --gemm-sm-carveout 4
  solo tf32-solo0 0 tf32; solo tf32-solo1 1 tf32
  ab tf32-ce 2 tf32 vitddp --allreduce copy-engine
  ab tf32-ce-co4 2 tf32 vitddp --allreduce copy-engine --gemm-sm-carveout 4
  solo bf16-solo0-co4 0 bf16 --gemm-sm-carveout 4
  solo bf16-solo0-end 0 bf16
} 2>&1 | tee "$W/log.txt"
ab_finish
