#!/usr/bin/env bash
# Issue 1 on the 2 x H200 machine: GPU tests, 2-GPU tests, ViT-L/32 runs, Fashion-MNIST run.
# Run from the repository root with the binaries in carry/ (built on the CPU machine), $OUT set.
set -u
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPI="mpirun --bind-to none -x NCCL_NVLS_ENABLE=0"
LOG=$OUT/issue1.log
{
  date -u; nvidia-smi -L; nvidia-smi topo -m
  echo "== PyTorch bucket reference"; python3 tests/reference/ddp_buckets.py > $OUT/ddp_buckets_vit_l_32.txt; head -3 $OUT/ddp_buckets_vit_l_32.txt
  echo "== gpu_tests"; carry/gpu_tests
  echo "== gpu_mpi_tests (2 GPUs)"; $MPI -np 2 carry/gpu_mpi_tests
  echo "== vit_l_32, 1 GPU, no DDP"; $MPI -np 1 carry/vitddp --no-ddp --steps 20 --out $OUT/vit_l_32-np1-noddp.h5
  echo "== vit_l_32, 2 GPUs, 25 MB buckets"; $MPI -np 2 carry/vitddp --steps 20 --out $OUT/vit_l_32-np2-25mb.h5
  echo "== Fashion-MNIST, 2 GPUs"; $MPI -np 2 carry/vitddp --data idx:carry/fashion-mnist --model vit_tiny --batch-size 64 \
      --warmup-steps 0 --steps 400 --cooldown-steps 0 --lr 0.05 --momentum 0.9 --progress-every 50 --out $OUT/fmnist-vit_tiny-np2.h5
} > $LOG 2>&1
echo "exit $?"; tail -c 6000 $LOG
