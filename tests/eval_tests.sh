#!/usr/bin/env bash
# The evaluation pass of the real binary on the CPU backend (--eval-every, --eval-split):
# an odd-sized test split (1001 images, plain uncompressed IDX files) evaluated by 2 ranks counts
# every image once (eval/samples = 1001 at every evaluation, eval/step = 2, 4, 5); 1 and 2 ranks
# give the same correct count and loss for the same parameters; --eval-split train evaluates the
# training split; without an IDX data set or without its t10k files: exit 2 naming the option;
# results/vitddp_plot.py eval draws the curve.
# Usage: eval_tests.sh <vitddp binary> <mpirun> <python3>
set -u
BIN=$1
source "$(dirname "$0")/test_util.sh" "$2"
PY=$3


# A small MNIST-format data set: 96 training and 1001 test images of 28 x 28, 10 classes, whose
# label is visible in the pixels (so a trained model beats chance), written uncompressed.
"$PY" - "$TMP/data" <<'PY'
import os, struct, sys, random
d = sys.argv[1]
os.makedirs(d)
rnd = random.Random(0)
def write(split, n):
    labels = [k % 10 for k in range(n)]
    rnd.shuffle(labels)
    px = bytearray()
    for y in labels:
        img = bytearray(rnd.randrange(0, 60) for _ in range(784))
        for r in range(28):
            img[r * 28 + 2 * y + 4] = 255  # a bright column at x = 2y + 4
        px += img
    with open(os.path.join(d, split + "-images-idx3-ubyte"), "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, 28, 28) + px)
    with open(os.path.join(d, split + "-labels-idx1-ubyte"), "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + bytes(labels))
write("train", 96)
write("t10k", 1001)
PY

COMMON="--backend cpu --model vit_fmnist_cpu --batch-size 16 --data idx:$TMP/data --data-workers 1"

expect_error "--eval-every with synthetic data" "--eval-every: --data synthetic has no --eval-split test" --model vit_micro --eval-every 5
expect_error "--eval-every with device data" "--eval-every: --data device" --model vit_micro --data device --eval-every 5
expect_error "bad --eval-split" "--eval-split: unknown value 'val'" --eval-split val
mkdir -p "$TMP/trainonly"
cp "$TMP/data/train-"* "$TMP/trainonly/"
expect_error "no t10k files" "--eval-split test: IDX data: neither" --model vit_fmnist_cpu --data "idx:$TMP/trainonly" \
  --eval-every 1 --out "$TMP/none.h5"
if [ ! -e "$TMP/none.h5" ]; then ok "no results file after the refusal"; else bad "results file left after the refusal"; fi

# 2 ranks, 5 steps (0-4), evaluations after steps 1, 3 and 4 (the last); steps numbered from 0 as in
# the results file: the console and eval/step say the same.
out=$(timeout 300 $MPIRUN -np 2 "$BIN" $COMMON --warmup-steps 1 --steps 3 --cooldown-steps 1 --lr 0.05 \
      --momentum 0.9 --eval-every 2 --out "$TMP/np2.h5" 2>&1); rc=$?
if [ $rc -eq 0 ]; then ok "2-rank run with --eval-every 2"; else bad "2-rank run rc=$rc: $out"; fi
line=$(grep "eval after step 4:" <<<"$out")
if grep -qE '^\[vitddp\] eval after step 4: top-1 [0-9]+\.[0-9]{2}% \([0-9]+/1001\), loss [0-9]+\.[0-9]{4}, [0-9]+\.[0-9] s$' <<<"$line"
then ok "progress line: $line"; else bad "progress line: '$line' in $out"; fi
check=$("$PY" - "$TMP/np2.h5" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f:
    step, acc, loss = f["eval/step"][()], f["eval/accuracy"][()], f["eval/loss"][()]
    samples, t = f["eval/samples"][()], f["eval/time"][()]
    assert step.shape == (1, 3), step.shape
    assert step.tolist() == [[1, 3, 4]], step
    assert f.attrs["step_numbering"] == "0-based"
    assert samples.tolist() == [[1001] * 3], samples
    assert ((acc >= 0) & (acc <= 1)).all() and np.isfinite(loss).all() and (loss > 0).all(), (acc, loss)
    assert (t > 0).all(), t
    assert f["eval/accuracy"].attrs["units"] == "1" and f["eval/time"].attrs["units"] == "s"
    assert f["timing/forward"].shape[1] == 5  # evaluations add no training step
    print("ok steps", step.tolist(), "samples", samples.tolist(), "accuracy", np.round(acc, 4).tolist())
PY
)
if [[ "$check" == ok* ]]; then ok "eval/* series: $check"; else bad "eval/* series: $check"; fi

# The same parameters evaluated by 1 and by 2 ranks: same correct count, same loss (lr 0: the
# parameters stay at their random initialisation).
for np in 1 2; do
  out=$(timeout 300 $MPIRUN -np $np "$BIN" $COMMON --init random --lr 0 --warmup-steps 0 --steps 1 --cooldown-steps 0 \
        --eval-every 1 --out "$TMP/lr0-np$np.h5" 2>&1) || bad "lr 0 run on $np rank(s): $out"
done
check=$("$PY" - "$TMP/lr0-np1.h5" "$TMP/lr0-np2.h5" <<'PY'
import sys, h5py
a, b = (h5py.File(p, "r") for p in sys.argv[1:3])
ca, cb = a["eval/accuracy"][0, -1] * 1001, b["eval/accuracy"][0, -1] * 1001
la, lb = a["eval/loss"][0, -1], b["eval/loss"][0, -1]
assert a["eval/samples"][0, -1] == b["eval/samples"][0, -1] == 1001
assert round(ca) == round(cb), (ca, cb)
assert abs(la - lb) <= 1e-9 * abs(la), (la, lb)
print("ok correct %d, loss %.9f (1 rank) / %.9f (2 ranks)" % (round(ca), la, lb))
PY
)
if [[ "$check" == ok* ]]; then ok "1 rank = 2 ranks: $check"; else bad "1 rank vs 2 ranks: $check"; fi

# --eval-split train: the 96 training images.
out=$(timeout 300 $MPIRUN -np 2 "$BIN" $COMMON --warmup-steps 0 --steps 2 --cooldown-steps 0 --eval-every 5 \
      --eval-split train --out "$TMP/train.h5" 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q "eval after step 1: .*(.*/96)" <<<"$out"; then ok "--eval-split train evaluates 96 images"
else bad "--eval-split train rc=$rc: $out"; fi

# results/vitddp_plot.py eval: a PNG of the curve; a file without evaluations is one line, exit 2.
PLOT="$(dirname "$0")/../results/vitddp_plot.py"
out=$("$PY" "$PLOT" eval "$TMP/np2.h5" -o "$TMP/eval.png" --target 50 2>&1); rc=$?
if [ $rc -eq 0 ] && is_png "$TMP/eval.png"; then
  ok "vitddp_plot.py eval writes a PNG"; else bad "vitddp_plot.py eval rc=$rc: $out"; fi
out=$(timeout 120 $MPIRUN -np 1 "$BIN" --backend cpu --model vit_micro --batch-size 2 --warmup-steps 0 --steps 1 \
      --cooldown-steps 0 --out "$TMP/noeval.h5" 2>&1)
out=$("$PY" "$PLOT" eval "$TMP/noeval.h5" -o "$TMP/noeval.png" 2>&1); rc=$?
if [ $rc -eq 2 ] && grep -q "no dataset 'eval/step': run vitddp with --eval-every N" <<<"$out"; then ok "vitddp_plot.py eval without eval/*: exit 2 ($out)"
else bad "vitddp_plot.py eval on a file without eval/*: rc=$rc: $out"; fi

finish
