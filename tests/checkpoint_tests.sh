#!/usr/bin/env bash
# Checkpoints and --resume of the real binary on the CPU backend, 2 ranks:
#  - an 8-step run (steps 0..7) with --checkpoint-every 4, and a second run resumed from its
#    checkpoint after step 3 (`step` 4: the resume starts at step 4), give bit-identical
#    training/loss and training/lr for steps 4..7 and bit-identical parameters and optimizer state
#    after step 7 (`step` 8): SGD + momentum, AdamW + warm-up/cosine (with a skipped NaN
#    step), gradient accumulation; --data synthetic and the Fashion-MNIST IDX set when installed;
#  - a writer killed between the .tmp file and the rename leaves nothing under the final name;
#  - SIGTERM writes a checkpoint of the last completed step;
#  - bad resumes exit 2 naming the option (batch size, rank count, files, PowerSGD, ...).
# Usage: checkpoint_tests.sh <vitddp> <mpirun> <python3 with h5py>
set -u
BIN=$1
source "$(dirname "$0")/test_util.sh" "$2"
PY=$3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
FMNIST=/usr/share/datasets/fashion-mnist
# 8 steps: 2 warm-up, 4 timed, 2 cool-down.
SMALL="--backend cpu --batch-size 4 --warmup-steps 2 --steps 4 --cooldown-steps 2 --first-bucket-mb 0.0005 --bucket-cap-mb 0.002 --init random"

# compare FULL.h5 RESUMED.h5 CKPT_FULL CKPT_RESUMED: steps 4..7 bit for bit, resume attributes,
# final parameters and optimizer state bit for bit. Prints "ok ..." or the difference.
compare() {
  "$PY" - "$@" <<'PY'
import sys, h5py, numpy as np
full, res, cf, cr = sys.argv[1:5]
with h5py.File(full, "r") as a, h5py.File(res, "r") as b:
    la, lb = a["training/loss"][()], b["training/loss"][()]
    assert la.shape == (2, 8) and lb.shape == (2, 4), (la.shape, lb.shape)
    # bit patterns, so that a NaN step (skipped) compares too
    assert (la[:, 4:].view(np.uint64) == lb.view(np.uint64)).all(), ("loss", la[:, 4:], lb)
    ra, rb = a["training/lr"][()], b["training/lr"][()]
    assert (ra[:, 4:].view(np.uint64) == rb.view(np.uint64)).all(), ("lr", ra, rb)
    na, nb = a["training/nonfinite"][()], b["training/nonfinite"][()]
    assert (na[:, 4:] == nb).all(), ("nonfinite", na, nb)
    assert b.attrs["resumed_from_step"] == 4 and b.attrs["resumed_from"].endswith("-4.h5"), dict(b.attrs)
    assert b.attrs["steps_completed"] == 8 and a.attrs["resumed_from"] == "", (b.attrs["steps_completed"],)
    losses = " ".join("%.9g" % x for x in lb[0])
with h5py.File(cf, "r") as a, h5py.File(cr, "r") as b:
    assert a.attrs["step"] == b.attrs["step"] == 8
    assert a.attrs["optimizer_steps"] == b.attrs["optimizer_steps"]
    updates = a.attrs["optimizer_steps"]
    assert (a["data/batches_consumed"][()] == b["data/batches_consumed"][()]).all()
    n = 0
    def same(name, obj):
        global n
        if isinstance(obj, h5py.Dataset):
            assert (obj[()].view(np.uint32 if obj.dtype == np.float32 else np.uint64) ==
                    b[name][()].view(np.uint32 if obj.dtype == np.float32 else np.uint64)).all(), name
            n += 1
    a.visititems(same)
print("ok: rank-0 losses of steps 4-7 %s; %d tensors of the final (step 8) checkpoints identical; %d updates" %
      (losses, n, updates))
PY
}

# resume_case NAME ARGS...: full run with checkpoints every 4 steps, then the resumed run.
resume_case() {
  local name=$1
  shift
  local out rc
  out=$(timeout 300 $MPIRUN -np 2 "$BIN" $SMALL "$@" --checkpoint-every 4 --checkpoint-path "$TMP/$name-{step}.h5" \
        --out "$TMP/$name-full.h5" 2>&1); rc=$?
  if [ $rc -ne 0 ] || [ ! -f "$TMP/$name-4.h5" ] || [ ! -f "$TMP/$name-8.h5" ]; then bad "$name: full run rc=$rc: $out"; return; fi
  # Steps numbered from 0: the checkpoint written after step 3 is the one a resume starts from at step 4.
  if ! grep -q "checkpoint after step 3 written to .*$name-4.h5 (.* s; a resume starts at step 4)" <<<"$out" ||
     ! grep -q "checkpoint after step 7 written to .*$name-8.h5 " <<<"$out"; then bad "$name: checkpoint lines: $out"; return; fi
  out=$(timeout 300 $MPIRUN -np 2 "$BIN" $SMALL "$@" --resume "$TMP/$name-4.h5" --checkpoint-every 4 \
        --checkpoint-path "$TMP/$name-res-{step}.h5" --out "$TMP/$name-res.h5" 2>&1); rc=$?
  if [ $rc -ne 0 ] || ! grep -q "resuming from .*$name-4.h5 at step 4 of 8" <<<"$out"; then bad "$name: resumed run rc=$rc: $out"; return; fi
  local check
  check=$(compare "$TMP/$name-full.h5" "$TMP/$name-res.h5" "$TMP/$name-8.h5" "$TMP/$name-res-8.h5" 2>&1)
  if [[ "$check" == ok* ]]; then ok "$name: resumed at step 4 = uninterrupted ($check)"; else bad "$name: $check"; fi
}

resume_case sgd-synthetic --model vit_micro --lr 0.1 --momentum 0.9 --weight-decay 1e-3
resume_case adamw-synthetic --model vit_micro --optimizer adamw --lr 0.01 --weight-decay 0.01 --lr-schedule cosine \
  --lr-warmup-steps 3 --min-lr 0.001 --debug-nan-at-step 5 --on-nonfinite skip
resume_case adamw-accum --model vit_micro --optimizer adamw --lr 0.01 --grad-accum-steps 2
if [ -d "$FMNIST" ]; then
  resume_case sgd-fmnist --model vit_micro --num-classes 10 --data idx:$FMNIST --lr 0.05 --momentum 0.9
  resume_case adamw-fmnist --model vit_micro --num-classes 10 --data idx:$FMNIST --optimizer adamw --lr 0.003 \
    --lr-schedule cosine --lr-warmup-steps 2
else
  bad "no Fashion-MNIST in $FMNIST (make deps installs dataset-fashion-mnist): the IDX resume cases cannot run"
fi

# A writer killed (SIGKILL) after the .tmp file is complete, before the rename: nothing under the
# final name, the .tmp is a complete checkpoint.
out=$(timeout 120 $MPIRUN -np 2 "$BIN" $SMALL --model vit_micro --checkpoint-every 2 --checkpoint-path "$TMP/crash.h5" \
      --debug-crash-in-checkpoint --out "$TMP/crash-run.h5" 2>&1); rc=$?
step=$("$PY" -c "import h5py,sys; print(h5py.File(sys.argv[1],'r').attrs['step'])" "$TMP/crash.h5.tmp" 2>&1)
if [ $rc -ne 0 ] && [ ! -e "$TMP/crash.h5" ] && [ "$step" = "2" ]; then ok "killed checkpoint writer (exit $rc): no $TMP/crash.h5, complete crash.h5.tmp of step $step"
else bad "crash: rc=$rc final exists: $([ -e "$TMP/crash.h5" ] && echo yes || echo no), tmp step '$step': $out"; fi
# The next run writes over the stale .tmp and publishes normally.
out=$(timeout 120 $MPIRUN -np 2 "$BIN" $SMALL --model vit_micro --checkpoint-every 2 --checkpoint-path "$TMP/crash.h5" \
      --out "$TMP/crash-run2.h5" 2>&1); rc=$?
if [ $rc -eq 0 ] && [ -f "$TMP/crash.h5" ] && [ ! -e "$TMP/crash.h5.tmp" ]; then ok "a later run replaces the stale .tmp and publishes crash.h5"
else bad "after crash: rc=$rc: $out"; fi

# SIGTERM: every rank finishes its step, a checkpoint of that step is written, and resuming from it works.
$MPIRUN -np 2 "$BIN" ${SMALL/--warmup-steps 2 --steps 4/--warmup-steps 1 --steps 100000} --model vit_micro --progress-every 1000 --checkpoint-every 100000 \
  --checkpoint-path "$TMP/term.h5" --out "$TMP/term-run.h5" > "$TMP/term.log" 2>&1 &
pid=$!
sleep 4
kill -TERM $pid
wait $pid; rc=$?
info=$("$PY" -c "
import h5py, sys
r, c = h5py.File(sys.argv[1], 'r'), h5py.File(sys.argv[2], 'r')
assert r.attrs['steps_completed'] == c.attrs['step'], (r.attrs['steps_completed'], c.attrs['step'])
print(c.attrs['step'])" "$TMP/term-run.h5" "$TMP/term.h5" 2>&1)
if [ $rc -ne 0 ] && [[ "$info" =~ ^[0-9]+$ ]]; then ok "SIGTERM (exit $rc): checkpoint of the last completed step $info"
else bad "SIGTERM checkpoint: rc=$rc $info $(tail -3 "$TMP/term.log")"; fi

EXPECT_ARGS=$SMALL  # expect_error (test_util.sh): the small run's options first
C4="$TMP/sgd-synthetic-4.h5"
S="--model vit_micro --lr 0.1 --momentum 0.9 --weight-decay 1e-3"
# (each option once: where a case changes one of $SMALL's, it is replaced in EXPECT_ARGS)
EXPECT_ARGS=${SMALL/--batch-size 4/--batch-size 8} expect_error "resume with another batch size" \
  "--batch-size: the checkpoint was written with '4', this run has '8'" $S --resume "$C4" --out "$TMP/e1.h5"
NP=1 expect_error "resume on another number of ranks" "ranks: the checkpoint was written by 2 rank(s), this run has 1" \
  $S --resume "$C4" --out "$TMP/e2.h5"
expect_error "resume with another optimizer" "--optimizer: the checkpoint was written with 'sgd', this run has 'adamw'" \
  --model vit_micro --optimizer adamw --lr 0.1 --resume "$C4" --out "$TMP/e3.h5"
expect_error "resume with another model" "--model: the checkpoint was written with 'vit_micro', this run has 'vit_tiny'" \
  --model vit_tiny --lr 0.1 --momentum 0.9 --weight-decay 1e-3 --resume "$C4" --out "$TMP/e4.h5"
EXPECT_ARGS=${SMALL/--steps 4 --cooldown-steps 2/--steps 1 --cooldown-steps 1} expect_error "resume past the end" \
  "--resume: the checkpoint is at step 4 but this run has 4 steps" $S --resume "$C4" --out "$TMP/e5.h5"
expect_error "a fault before the resumed run's first step" \
  "--debug-fail-at-step 1: has no effect: this run resumes at step 4 (--resume)" $S --resume "$C4" --debug-fail-at-step 1 \
  --out "$TMP/e5b.h5"
expect_error "missing checkpoint" "--resume: cannot open HDF5 file '$TMP/none.h5': no such file" $S --resume "$TMP/none.h5" --out "$TMP/e6.h5"
"$BIN" --backend cpu --model vit_micro --steps 1 --warmup-steps 0 --cooldown-steps 0 --save-weights "$TMP/w.h5" --out "$TMP/w-run.h5" >/dev/null 2>&1
expect_error "a weights file is not a checkpoint" "is not a vitddp checkpoint" $S --resume "$TMP/w.h5" --out "$TMP/e7.h5"
expect_error "PowerSGD refuses checkpoints" "--compression: powersgd: checkpoints do not hold PowerSGD's state" \
  --model vit_micro --compression powersgd --checkpoint-every 2 --out "$TMP/e8.h5"
expect_error "PowerSGD refuses --resume" "--compression: powersgd" --model vit_micro --compression powersgd --resume "$C4" --out "$TMP/e9.h5"
expect_error "existing checkpoint file" "--checkpoint-path: '$TMP/sgd-synthetic-4.h5' exists (use --overwrite" \
  $S --checkpoint-every 4 --checkpoint-path "$TMP/sgd-synthetic-{step}.h5" --out "$TMP/e10.h5"
expect_error "checkpoint directory missing" "--checkpoint-path: directory '$TMP/no' does not exist" \
  --model vit_micro --checkpoint-every 4 --checkpoint-path "$TMP/no/c.h5" --out "$TMP/e11.h5"
expect_error "checkpoint path without --checkpoint-every" "--checkpoint-path: has no effect without --checkpoint-every" \
  --model vit_micro --checkpoint-path "$TMP/c.h5" --out "$TMP/e12.h5"
expect_error "--init-from with --resume" "--init-from: cannot be combined with --resume" \
  $S --resume "$C4" --init-from "$TMP/w.h5" --out "$TMP/e13.h5"
for f in e1 e2 e3 e4 e5 e6 e7 e10 e11; do [ -e "$TMP/$f.h5" ] && bad "refused run $f left a results file"; done

finish
