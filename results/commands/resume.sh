#!/usr/bin/env bash
# Checkpoint + --resume on 2 GPUs must give bit-identical losses to the uninterrupted run. For each
# case, an 8-step run (2 warm-up, 4 timed, 2 cool-down) with --checkpoint-every 4, then a run resumed
# from its step-4 checkpoint; compares training/loss and training/lr of steps 5..8 bit for bit, and
# every tensor of the two step-8 checkpoints (parameters, optimizer state, data positions). Also the
# GPU Catch2 tests of the optimizer wiring and TrainState ([optim], [checkpoint]) when GPU_TESTS is
# built. Prints PASS/FAIL per case and overall.
# Usage: bash results/commands/resume.sh OUT   |   bash results/commands/resume.sh --readme DIR
#   GPU_TESTS=build/tests/gpu_tests, MODEL=vit_b_32, FMNIST=/usr/share/datasets/fashion-mnist.
# Writes into OUT: resume.log, log.txt, README.md (the files of the runs stay in a temporary
# folder). About 2 minutes.
TOPIC=resume
TITLE="Checkpoint and resume on 2 GPUs: bit-identical losses"
NEED_GPUS=2
GPU_TESTS=${GPU_TESTS:-build/tests/gpu_tests}
MODEL=${MODEL:-vit_b_32}
FMNIST=${FMNIST:-/usr/share/datasets/fashion-mnist}
about() {
  cat <<'MD'
Per case, two 2-rank runs of vit_b_32 (batch 32): 8 steps uninterrupted with `--checkpoint-every 4`,
and a run resumed from the step-4 checkpoint. The training/loss of steps 5-8 of both ranks must be
equal bit for bit, and the two step-8 checkpoints (parameters, optimizer state, step, data
position) byte-identical. The table below is read from `resume.log` (the runs' files are not
kept), so it stands as measured.
MD
}
includes() {
  [ -s "$1/resume.log" ] || return 0
  { echo "| case | result |"; echo "| --- | --- |"
    grep -E '^(PASS|FAIL) [^(]' "$1/resume.log" | sed -E 's/^(PASS|FAIL) ([^:]*)(: ?(.*))?$/| \2 | \1 \4 |/'
  } > "$1/resume_table.md"
  echo "$1/resume_table.md"
}
experiment() {
MP2="${MPI[*]} -np 2"
D=$(mktemp -d)
BASE="--backend gpu --model $MODEL --batch-size 32 --warmup-steps 2 --steps 4 --cooldown-steps 2 --init random --progress-every 1"
failed=0
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1"; failed=$((failed + 1)); }

compare() {  # full.h5 resumed.h5 ckpt-full-8 ckpt-resumed-8 -> "ok ..." or the difference
  "$PY" - "$@" <<'PY'
import sys, h5py, numpy as np
full, res, cf, cr = sys.argv[1:5]
with h5py.File(full, "r") as a, h5py.File(res, "r") as b:
    la, lb = a["training/loss"][()], b["training/loss"][()]
    assert la.shape == (2, 8) and lb.shape == (2, 4), (la.shape, lb.shape)
    if not (la[:, 4:].view(np.uint64) == lb.view(np.uint64)).all():
        raise SystemExit("losses differ: uninterrupted %r resumed %r" % (la[:, 4:].tolist(), lb.tolist()))
    assert (a["training/lr"][()][:, 4:] == b["training/lr"][()]).all(), "lr differs"
    losses = " ".join("%.9g" % x for x in lb[0])
with h5py.File(cf, "r") as a, h5py.File(cr, "r") as b:
    updates = a.attrs["optimizer_steps"]
    bad = []
    def same(name, obj):
        if isinstance(obj, h5py.Dataset):
            x, y = obj[()], b[name][()]
            if x.tobytes() != y.tobytes():
                bad.append("%s (max abs diff %g)" % (name, np.abs(x.astype(np.float64) - y.astype(np.float64)).max()))
    a.visititems(same)
    if bad:
        raise SystemExit("step-8 checkpoints differ in %d tensors, e.g. %s" % (len(bad), bad[:3]))
print("ok: rank-0 losses of steps 5-8 %s; step-8 checkpoints identical (%d updates)" % (losses, updates))
PY
}

case_() {  # case_ NAME ARGS...
  local name=$1; shift
  echo "== $name: $*"
  if ! $MP2 "$VITDDP" $BASE "$@" --checkpoint-every 4 --checkpoint-path "$D/$name-{step}.h5" --out "$D/$name-full.h5" \
       > "$D/$name-full.log" 2>&1; then
    fail "$name: uninterrupted run failed: $(tail -3 "$D/$name-full.log")"; return
  fi
  if ! $MP2 "$VITDDP" $BASE "$@" --resume "$D/$name-4.h5" --checkpoint-every 4 --checkpoint-path "$D/$name-res-{step}.h5" \
       --out "$D/$name-res.h5" > "$D/$name-res.log" 2>&1; then
    fail "$name: resumed run failed: $(tail -3 "$D/$name-res.log")"; return
  fi
  grep -E "checkpoint after|resuming" "$D/$name-full.log" "$D/$name-res.log" | sed 's/^/    /'
  local r
  r=$(compare "$D/$name-full.h5" "$D/$name-res.h5" "$D/$name-8.h5" "$D/$name-res-8.h5" 2>&1)
  if [[ "$r" == ok* ]]; then pass "$name: $r"; else fail "$name: $r"; fi
  rm -f "$D"/$name-*.h5.tmp
}

{
  date -u; nvidia-smi -L
  echo "== GPU Catch2 tests: optimizer wiring and TrainState"
  if [ ! -x "$GPU_TESTS" ]; then echo "skip: GPU_TESTS=$GPU_TESTS not built"
  elif "$GPU_TESTS" "[optim],[checkpoint]"; then pass "gpu_tests [optim],[checkpoint]"; else fail "gpu_tests [optim],[checkpoint]"; fi
  case_ sgd-synthetic --lr 0.05 --momentum 0.9 --weight-decay 1e-4
  case_ adamw-synthetic --optimizer adamw --lr 1e-3 --weight-decay 0.05 --lr-schedule cosine --lr-warmup-steps 3
  case_ adamw-device --data device --optimizer adamw --lr 1e-3 --lr-schedule cosine --lr-warmup-steps 3 \
        --debug-nan-at-step 5 --on-nonfinite skip
  case_ adamw-bf16 --precision bf16 --optimizer adamw --lr 1e-3 --grad-accum-steps 2
  case_ sgd-fp16-compression --compression fp16 --lr 0.05 --momentum 0.9
  if [ -d "$FMNIST" ]; then
    base=$BASE  # the Fashion-MNIST case runs the small model (vitddp refuses a repeated --model)
    BASE=${BASE/"--model $MODEL"/--model vit_tiny}
    case_ adamw-fmnist --data idx:$FMNIST --optimizer adamw --lr 1e-3
    BASE=$base
  else
    echo "skip: $FMNIST not installed on this machine"
  fi
  # A killed writer leaves nothing under the final name.
  $MP2 "$VITDDP" $BASE --checkpoint-every 2 --checkpoint-path "$D/crash.h5" --debug-crash-in-checkpoint \
    --out "$D/crash-run.h5" > "$D/crash.log" 2>&1
  if [ ! -e "$D/crash.h5" ] && [ -f "$D/crash.h5.tmp" ]; then pass "killed writer: only crash.h5.tmp exists"
  else fail "killed writer: $(cd "$D" && echo crash*)"; fi
  echo "== $failed failure(s)"
  [ $failed -eq 0 ] && echo "PASS (all)" || echo "FAIL ($failed)"
} > "$OUT/resume.log" 2>&1
cat "$OUT/resume.log"
rm -rf "$D"
[ $failed -eq 0 ] || status=1
}
source "$(dirname "$0")/lib.sh"
main "$@"
