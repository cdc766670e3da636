#!/usr/bin/env bash
# The CI accuracy test's recipe (tests/accuracy_fmnist.sh) for seeds 0, 1, 2, keeping the files:
# vit_fmnist_cpu on 2 CPU ranks, Fashion-MNIST, batch 64 per rank, SGD lr 0.05 momentum 0.9,
# 400 steps, evaluation on the whole test split every 100 steps. Run on the CPU machine from the
# repository root after `make`: bash results/commands/cpu_accuracy_fmnist.sh OUTDIR
set -u
OUT=${1:?usage: cpu_accuracy_fmnist.sh OUTDIR}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for seed in 0 1 2; do
  start=$(date +%s)
  mpirun --oversubscribe --bind-to none -np 2 build/vitddp --backend cpu --model vit_fmnist_cpu \
    --data idx:/usr/share/datasets/fashion-mnist --data-workers 1 --batch-size 64 --lr 0.05 --momentum 0.9 \
    --seed $seed --warmup-steps 0 --steps 400 --cooldown-steps 0 --eval-every 100 --progress-every 100 \
    --overwrite --out "$OUT/seed$seed.h5" | grep -E "eval after|error"
  echo "seed $seed: $(($(date +%s) - start)) s"
done
