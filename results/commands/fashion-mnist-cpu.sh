#!/usr/bin/env bash
# The CI accuracy test's recipe (tests/accuracy_fmnist.sh, ctest accuracy_fmnist) for seeds 0, 1, 2,
# keeping the files: vit_fmnist_cpu (28 x 28, patch 7, 2 blocks of width 32) on 2 CPU ranks of the
# CPU backend, Fashion-MNIST, batch 64 per rank, SGD lr 0.05 momentum 0.9, 400 steps, evaluation on
# the whole test split every 100 steps. No GPU needed.
# Usage: bash results/commands/fashion-mnist-cpu.sh [DATA_DIR] OUT  |  ... --readme DIR
#   DATA_DIR: the Fashion-MNIST IDX files [/usr/share/datasets/fashion-mnist]; SEEDS="0 1 2".
# Writes into OUT: seed<s>.h5, accuracy.md, log.txt, README.md. About 1 minute per seed on 2 cores.
TOPIC=fashion-mnist-cpu
TITLE="Fashion-MNIST on the CPU backend: the CI accuracy test's recipe, three seeds"
USAGE_ARGS="[DATA_DIR] "
about() {
  cat <<'MD'
`vit_fmnist_cpu` (28 x 28, patch 7, 2 blocks of width 32) trained by 2 MPI ranks of the CPU backend
(double-accumulating reference kernels, MPI all-reduce): batch 64 per rank, SGD lr 0.05 momentum
0.9, 400 steps, the whole 10,000-image test split evaluated every 100 steps. The CI test
(`tests/accuracy_fmnist.sh`) asserts at least 70% at the last evaluation and that every evaluation
counted 10,000 images.
MD
}
includes() {
  { echo "## Test accuracy (tools/eval_table.py)"; echo; "$PY" "$REPO/results/tools/eval_table.py" "$1"; } > "$1/accuracy.md" &&
    echo "$1/accuracy.md"
}
experiment() {
  local data=${ARGS[0]:-/usr/share/datasets/fashion-mnist} seed start
  [ -d "$data" ] || die "$data: no such folder (the Fashion-MNIST IDX files)"
  for seed in ${SEEDS:-0 1 2}; do
    start=$(date +%s)
    "$MPIRUN" --oversubscribe --bind-to none -np 2 "$VITDDP" --backend cpu --model vit_fmnist_cpu \
      --data "idx:$data" --data-workers 1 --batch-size 64 --lr 0.05 --momentum 0.9 \
      --seed "$seed" --warmup-steps 0 --steps 400 --cooldown-steps 0 --eval-every 100 --progress-every 100 \
      --overwrite --out "$OUT/seed$seed.h5" | grep -E "eval after|error" || status=1
    echo "seed $seed: $(($(date +%s) - start)) s"
  done
}
source "$(dirname "$0")/lib.sh"
main "$@"
