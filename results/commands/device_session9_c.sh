#!/usr/bin/env bash
# Session 9, job c: bucket capacity x comm streams for the copy-engine all-reduce on 2 GPUs, with
# 300-step windows (10 warm-up), ViT-L/32 batch 32, data on the GPU, and each GPU's 1-GPU figure
# (GPU 0 and GPU 1 alone, --no-ddp), since DDP runs at the pace of the slower GPU (job b).
# Into $OUT/$JOB.tgz: log.txt and the HDF5 files <precision>-<run>.h5.
set -u -o pipefail
: "${JOB:?set JOB}"
source results/commands/lib_ab.sh
COMMON="--data device --warmup-steps 10 --steps 300 --cooldown-steps 0 --progress-every 1000 --overwrite"
solo() {  # solo NAME GPU PRECISION
  CUDA_VISIBLE_DEVICES=$2 timeout 120 mpirun --bind-to none -x CUDA_VISIBLE_DEVICES -x NCCL_NVLS_ENABLE=0 -np 1 \
    carry/vitddp --no-ddp --precision $3 $COMMON --out "$W/$1.h5" 2>&1 | grep -E "timed window|rror" | sed "s/^/$1: /"
}
{
  carry/vitddp --version
  solo bf16-solo0 0 bf16; solo bf16-solo1 1 bf16
  for s in 2 3; do
    for cap in 8 12 16 25 50; do ab bf16-cap$cap-s$s 2 bf16 vitddp --allreduce copy-engine --comm-streams $s --bucket-cap-mb $cap; done
  done
  for s in 1 2; do
    for cap in 12 25; do ab bf16c-cap$cap-s$s 2 bf16 vitddp --allreduce copy-engine --comm-streams $s --bucket-cap-mb $cap --compression bf16; done
  done
  solo tf32-solo0 0 tf32; solo tf32-solo1 1 tf32
  for cap in 12 25 50; do ab tf32-cap$cap-s1 2 tf32 vitddp --allreduce copy-engine --comm-streams 1 --bucket-cap-mb $cap; done
  solo bf16-solo0-end 0 bf16; solo bf16-solo1-end 1 bf16
} 2>&1 | tee "$W/log.txt"
ab_finish
