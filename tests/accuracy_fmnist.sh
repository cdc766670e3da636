#!/usr/bin/env bash
# Fidelity, in CI: a tiny ViT (vit_fmnist_cpu: 28x28, patch 7, 2 blocks of width 32)
# trained on Fashion-MNIST by 2 ranks of the CPU backend with SGD + momentum reaches at least 70%
# top-1 on the whole test split (10000 images, each counted once over the ranks) in a few
# minutes. Recipe: batch 64 per rank (128 in all), lr 0.05, momentum 0.9, 400 steps (51200
# images, 0.85 epoch), evaluation every 100 steps; about 75% at the end for seeds 0, 1 and 2
# (measured on 2 cores: about 80 s). Prints the accuracy curve; fails below 70% or when the
# evaluation did not count exactly 10000 images.
# Usage: accuracy_fmnist.sh <vitddp binary> <mpirun> <python3>
# Environment: VITDDP_FMNIST_DIR (default /usr/share/datasets/fashion-mnist, Debian's
# dataset-fashion-mnist), VITDDP_ACCURACY_SEED (default 0).
set -u
BIN=$1
source "$(dirname "$0")/test_util.sh" "$2"
PY=$3
DATA=${VITDDP_FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
SEED=${VITDDP_ACCURACY_SEED:-0}

if ! ls "$DATA"/t10k-images-idx3-ubyte* >/dev/null 2>&1; then
  echo "FAIL - no Fashion-MNIST in $DATA (apt-get install dataset-fashion-mnist, or set VITDDP_FMNIST_DIR)"
  exit 1
fi

start=$(date +%s)
timeout 540 $MPIRUN -np 2 "$BIN" --backend cpu --model vit_fmnist_cpu --data "idx:$DATA" --data-workers 1 \
  --batch-size 64 --lr 0.05 --momentum 0.9 --seed "$SEED" --warmup-steps 0 --steps 400 --cooldown-steps 0 \
  --eval-every 100 --progress-every 100 --out "$TMP/fmnist.h5" 2>&1
rc=$?
echo "vitddp: exit code $rc after $(($(date +%s) - start)) s"
[ $rc -eq 0 ] || { echo "FAIL - the training run failed"; exit 1; }

"$PY" - "$TMP/fmnist.h5" <<'PY'
import sys
import h5py

with h5py.File(sys.argv[1], "r") as f:
    steps = f["eval/step"][0]
    acc = f["eval/accuracy"][0]
    loss = f["eval/loss"][0]
    samples = f["eval/samples"][0]
    secs = f["eval/time"][0]
print("accuracy curve (Fashion-MNIST test split, vit_fmnist_cpu, 2 ranks, CPU backend):")
print("  step  top-1     loss    images  eval time")
for s, a, l, n, t in zip(steps, acc, loss, samples, secs):
    print("  %4d  %6.2f%%  %.4f  %6d  %5.1f s" % (s, 100 * a, l, n, t))
ok = len(acc) > 0 and acc[-1] >= 0.70 and (samples == 10000).all()
print("%s - final top-1 %.2f%% (need >= 70%%), every evaluation counted %s images"
      % ("ok  " if ok else "FAIL", 100 * acc[-1], sorted(set(samples.tolist()))))
sys.exit(0 if ok else 1)
PY
