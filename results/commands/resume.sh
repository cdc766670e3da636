#!/usr/bin/env bash
# Issue "[2 of 8] Fidelity" on 2 GPUs: checkpoint + --resume with the GPU backend must give
# bit-identical losses to the uninterrupted run. For each case, an 8-step run (2 warm-up, 4 timed,
# 2 cool-down) with --checkpoint-every 4, then a run resumed from its step-4 checkpoint; compares
# training/loss and training/lr of steps 5..8 bit for bit, and every tensor of the two step-8
# checkpoints (parameters, optimizer state, data positions). Also the GPU Catch2 tests of the
# optimizer wiring and TrainState ([optim], [checkpoint]). Prints PASS/FAIL per case and overall.
# Run from the repository root on the 2-GPU machine with the binaries in carry/
# (cp build/vitddp build/tests/gpu_tests carry/) and $OUT set:
#     bash results/commands/device_resume.sh
# Writes $OUT/resume.log. About 2 minutes. VITDDP=..., GPU_TESTS=..., MODEL=... override.
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
VITDDP=${VITDDP:-carry/vitddp}
GPU_TESTS=${GPU_TESTS:-carry/gpu_tests}
MODEL=${MODEL:-vit_b_32}
OUT=${OUT:-/tmp/resume-out}
mkdir -p "$OUT"
D=/tmp/resume; rm -rf $D; mkdir -p $D
MPI="mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -np 2"
BASE="--backend gpu --model $MODEL --batch-size 32 --warmup-steps 2 --steps 4 --cooldown-steps 2 --init random --progress-every 1"
FMNIST=${FMNIST:-/usr/share/datasets/fashion-mnist}
failed=0
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1"; failed=$((failed + 1)); }

compare() {  # full.h5 resumed.h5 ckpt-full-8 ckpt-resumed-8 -> "ok ..." or the difference
  python3 - "$@" <<'PY'
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
  if ! $MPI "$VITDDP" $BASE "$@" --checkpoint-every 4 --checkpoint-path "$D/$name-{step}.h5" --out "$D/$name-full.h5" \
       > "$D/$name-full.log" 2>&1; then
    fail "$name: uninterrupted run failed: $(tail -3 "$D/$name-full.log")"; return
  fi
  if ! $MPI "$VITDDP" $BASE "$@" --resume "$D/$name-4.h5" --checkpoint-every 4 --checkpoint-path "$D/$name-res-{step}.h5" \
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
  if "$GPU_TESTS" "[optim],[checkpoint]"; then pass "gpu_tests [optim],[checkpoint]"; else fail "gpu_tests [optim],[checkpoint]"; fi
  case_ sgd-synthetic --lr 0.05 --momentum 0.9 --weight-decay 1e-4
  case_ adamw-synthetic --optimizer adamw --lr 1e-3 --weight-decay 0.05 --lr-schedule cosine --lr-warmup-steps 3
  case_ adamw-device --data device --optimizer adamw --lr 1e-3 --lr-schedule cosine --lr-warmup-steps 3 \
        --debug-nan-at-step 5 --on-nonfinite skip
  case_ adamw-bf16 --precision bf16 --optimizer adamw --lr 1e-3 --grad-accum-steps 2
  case_ sgd-fp16-compression --compression fp16 --lr 0.05 --momentum 0.9
  if [ -d "$FMNIST" ]; then
    case_ adamw-fmnist --model vit_tiny --data idx:$FMNIST --optimizer adamw --lr 1e-3
  else
    echo "skip: $FMNIST not installed on this machine"
  fi
  # A killed writer leaves nothing under the final name.
  $MPI "$VITDDP" $BASE --checkpoint-every 2 --checkpoint-path "$D/crash.h5" --debug-crash-in-checkpoint \
    --out "$D/crash-run.h5" > "$D/crash.log" 2>&1
  if [ ! -e "$D/crash.h5" ] && [ -f "$D/crash.h5.tmp" ]; then pass "killed writer: only crash.h5.tmp exists"
  else fail "killed writer: $(ls $D | grep crash)"; fi
  echo "== $failed failure(s)"
  [ $failed -eq 0 ] && echo "PASS (all)" || echo "FAIL ($failed)"
} 2>&1 | tee "$OUT/resume.log"
