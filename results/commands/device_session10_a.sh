#!/usr/bin/env bash
# Session 10, job a: every GPU test (gpu_tests on 1 GPU, gpu_mpi_tests on 2 ranks), then
# --allreduce direct against copy-engine on 2 GPUs: ViT-L/32 batch 32, data on the GPU,
# 10 warm-up + 300 timed steps, each precision's 1-GPU figure (GPU 0 and GPU 1 alone) first.
# --allreduce direct exists only with results/2026-11-30-issue5-session10/direct-a/patches/
# allreduce-direct.patch applied (git apply, on 0e944c5); the job ran that build.
# Into $OUT/$JOB.tgz: log.txt, the test logs and the HDF5 files.
set -u -o pipefail
: "${JOB:?set JOB}"
source results/commands/lib_ab.sh
COMMON="--data device --warmup-steps 10 --steps 300 --cooldown-steps 0 --progress-every 1000 --overwrite"
{
  carry/vitddp --version
  ab_tests
  solo bf16-solo0 0 bf16; solo bf16-solo1 1 bf16
  ab bf16-ce 2 bf16 vitddp --allreduce copy-engine
  ab bf16-direct 2 bf16 vitddp --allreduce direct
  for b in 16 32 64; do ab bf16-direct-b$b 2 bf16 vitddp --allreduce direct --direct-blocks $b; done
  ab bf16-direct-s1 2 bf16 vitddp --allreduce direct --comm-streams 1
  ab bf16c-ce 2 bf16 vitddp --allreduce copy-engine --compression bf16
  ab bf16c-direct 2 bf16 vitddp --allreduce direct --compression bf16
  solo tf32-solo0 0 tf32; solo tf32-solo1 1 tf32
  ab tf32-ce 2 tf32 vitddp --allreduce copy-engine
  ab tf32-direct 2 tf32 vitddp --allreduce direct
  ab tf32c-direct 2 tf32 vitddp --allreduce direct --compression bf16
  solo bf16-solo0-end 0 bf16
} 2>&1 | tee "$W/log.txt"
ab_finish
