#!/usr/bin/env bash
# Test accuracy of a ViT trained on Fashion-MNIST by 2 GPUs: vit_fmnist (28 x 28 images as they are,
# patch 4 -> 49 patches + class token, 6 blocks of width 192, 3 heads; 1.8 M parameters), fp32,
# 2 ranks x batch 128, evaluation of the whole 10,000-image test split (each image once over the
# ranks) every 3 (AdamW) / 4 (SGD) epochs and after the last step. Two recipes:
#   adamw-30ep  AdamW lr 1e-3, weight decay 0.05, cosine with 468 warm-up steps, 30 epochs (7020 steps)
#   sgd-40ep    SGD lr 0.03, momentum 0.9, cosine with 234 warm-up steps, 40 epochs (9360 steps)
# Usage: bash results/commands/fashion-mnist.sh [DATA_DIR] OUT  |  ... --readme DIR
#   DATA_DIR holds train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte,
#   t10k-labels-idx1-ubyte, plain or .gz [/usr/share/datasets/fashion-mnist: Debian's
#   dataset-fashion-mnist]. RECIPES="adamw-30ep" runs one of them.
# Writes into OUT: <recipe>.h5 (packed into h5.tar.xz), <recipe>.log, <recipe>-accuracy.png
# (results/vitddp_plot.py eval, where matplotlib is installed), accuracy.md, log.txt, README.md.
# About 1.5 minutes on 2 x H200.
TOPIC=fashion-mnist
TITLE="Fashion-MNIST on 2 GPUs: test accuracy of vit_fmnist"
NEED_GPUS=2
USAGE_ARGS="[DATA_DIR] "
about() {
  cat <<'MD'
`vit_fmnist` (28 x 28 input, patch 4 -> 50 tokens, 6 blocks of width 192, 3 heads, MLP 768;
1,803,658 parameters), fp32, 2 ranks, batch 128 per GPU, trained on the 60,000 training images and
evaluated on the whole 10,000-image test split (`eval/samples` = 10000 at every evaluation). Two
recipes: AdamW + cosine (30 epochs) and SGD + momentum + cosine (40 epochs).
MD
}
includes() {
  { echo "## Test accuracy (tools/eval_table.py)"; echo; "$PY" "$REPO/results/tools/eval_table.py" "$1"; } > "$1/accuracy.md" &&
    echo "$1/accuracy.md"
}
experiment() {
  local data=${ARGS[0]:-/usr/share/datasets/fashion-mnist} r
  [ -d "$data" ] || die "$data: no such folder (the Fashion-MNIST IDX files)"
  local common=(--model vit_fmnist --data "idx:$data" --batch-size 128 --warmup-steps 0 --cooldown-steps 0
                --eval-split test --lr-schedule cosine --progress-every 702 --flush-every 234 --data-workers 4 --overwrite)
  for r in ${RECIPES:-adamw-30ep sgd-40ep}; do
    local opts
    case $r in
      adamw-30ep) opts=(--optimizer adamw --lr 1e-3 --weight-decay 0.05 --lr-warmup-steps 468 --steps 7020 --eval-every 702) ;;
      sgd-40ep) opts=(--lr 0.03 --momentum 0.9 --lr-warmup-steps 234 --steps 9360 --eval-every 936) ;;
      *) die "RECIPES: unknown recipe '$r' (adamw-30ep, sgd-40ep)" ;;
    esac
    echo "== $r"
    "${MPI[@]}" -np 2 "$VITDDP" "${common[@]}" "${opts[@]}" --out "$OUT/$r.h5" > "$OUT/$r.log" 2>&1 || status=1
    grep -E "eval after|error" "$OUT/$r.log"
    "$PY" "$REPO/results/vitddp_plot.py" eval "$OUT/$r.h5" --target 88 -o "$OUT/$r-accuracy.png" || true
  done
  includes "$OUT" > /dev/null
  pack
}
source "$(dirname "$0")/lib.sh"
main "$@"
