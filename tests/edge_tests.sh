#!/usr/bin/env bash
# Edges of the real binary on the CPU backend, each with the exact line it must print:
#  - every output path (--out, --trace, --save-weights, --checkpoint-path) checked at start-up
#    against the others and every input (exit 2 before any step, the input untouched);
#  - a full disk in each writer (tests/shims/fail_write.c: write/pwrite/fsync fail with ENOSPC on
#    matching paths): one line naming the file and the reason, a non-zero exit that is no crash
#    (never 139), the results file readable with its rows, no .tmp left;
#  - NaN / Inf in a weights file or a checkpoint refused at load, naming the tensor;
#  - messages naming the file, the sample, the images a batch needs, the timeout as given.
# Usage: edge_tests.sh <vitddp> <mpirun> <python3 with h5py> <libfail_write_shim.so>
set -u
BIN=$1
source "$(dirname "$0")/test_util.sh" "$2"
PY=$3
SHIM=$4
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
SMALL="--backend cpu --model vit_micro --batch-size 4 --first-bucket-mb 0.0005 --bucket-cap-mb 0.002"
RUN4="$SMALL --warmup-steps 1 --steps 2 --cooldown-steps 1"

# expect_line NAME LINE ARGS...: 2 ranks exit 2 printing exactly LINE (one whole line), no step run.
expect_line() {
  local name=$1 want=$2
  shift 2
  local out rc
  out=$(timeout 120 $MPIRUN -np 2 "$BIN" "$@" 2>&1); rc=$?
  if [ $rc -eq 2 ] && grep -qxF -- "$want" <<<"$out" && ! grep -q "step 1/" <<<"$out"; then ok "$name (exit 2)"
  else bad "$name: rc=$rc, wanted exit 2 and the line '$want', got: $out"; fi
}
# h5_rows FILE: "<steps in /timing/forward> <stop_reason>" or the error.
h5_rows() { "$PY" -c "import h5py,sys; f=h5py.File(sys.argv[1],'r'); print(f['timing/forward'].shape[1], f.attrs.get('stop_reason','-'))" "$1" 2>&1 | tail -1; }
# make_idx DIR COUNT LABELS...: a tiny IDX training split of COUNT 8x8 images with these labels.
make_idx() {
  "$PY" - "$@" <<'PY'
import os, struct, sys
d, n, labels = sys.argv[1], int(sys.argv[2]), [int(x) for x in sys.argv[3:]]
os.makedirs(d, exist_ok=True)
with open(os.path.join(d, "train-images-idx3-ubyte"), "wb") as f:
    f.write(struct.pack(">IIII", 0x803, n, 8, 8) + bytes((i * 7) % 256 for i in range(n * 64)))
with open(os.path.join(d, "train-labels-idx1-ubyte"), "wb") as f:
    f.write(struct.pack(">II", 0x801, n) + bytes(labels))
PY
}

# ---- 1. output paths, at start-up ----
timeout 120 $MPIRUN -np 2 "$BIN" $RUN4 --out "$TMP/base.h5" --save-weights "$TMP/w.h5" --checkpoint-every 2 \
  --checkpoint-path "$TMP/c-{step}.h5" >/dev/null 2>&1 || bad "the base run failed"
W="$TMP/w.h5"
sum_w=$(md5sum "$W" | cut -d' ' -f1)
expect_line "--trace over the results file" \
  "vitddp: error: --trace: '$TMP/r.h5' is also the --out file; give each output its own path" \
  $RUN4 --out "$TMP/r.h5" --trace "$TMP/r.h5" --overwrite
expect_line "--trace over the --init-from file, even with --overwrite" \
  "vitddp: error: --trace: '$W' is the --init-from file, an input of this run: it is never overwritten, not even with --overwrite" \
  $RUN4 --out "$TMP/r.h5" --init-from "$W" --trace "$W" --overwrite
[ "$(md5sum "$W" | cut -d' ' -f1)" = "$sum_w" ] && ok "the --init-from file is untouched" || bad "the --init-from file changed"
expect_line "--trace over a checkpoint" \
  "vitddp: error: --checkpoint-path: '$TMP/r.ckpt.h5' is also the --trace file; give each output its own path" \
  $RUN4 --out "$TMP/r.h5" --checkpoint-every 2 --trace "$TMP/r.ckpt.h5"
expect_line "--trace on a character device" \
  "vitddp: error: --trace: '/dev/null' is not a regular file (a character device)" \
  $RUN4 --out "$TMP/r.h5" --trace /dev/null --overwrite
mkfifo "$TMP/fifo"
expect_line "--trace on a FIFO" "vitddp: error: --trace: '$TMP/fifo' is not a regular file (a FIFO)" \
  $RUN4 --out "$TMP/r.h5" --trace "$TMP/fifo" --overwrite
mkdir "$TMP/tdir"
expect_line "--trace naming a directory" \
  "vitddp: error: --trace: '$TMP/tdir' is a directory; give the path of a file to write" \
  $RUN4 --out "$TMP/r.h5" --trace "$TMP/tdir"
[ ! -e "$TMP/tdir.tmp" ] && [ ! -e "$TMP/r.h5" ] && ok "no tdir.tmp, no results file" || bad "a refused --trace left files"
# Outputs that cannot be created although their directory looks writable: found at start-up by
# creating each absent output (and scratch file) and removing it again, not after the run.
LONG=$(printf 'a%.0s' {1..252})  # 252 characters: fine, but its scratch file's 256 are over NAME_MAX
expect_line "--trace whose scratch file's name is too long" \
  "vitddp: error: --trace (scratch file): '$TMP/$LONG.tmp' cannot be created (File name too long)" \
  $RUN4 --out "$TMP/r.h5" --trace "$TMP/$LONG"
if [ -w /proc ]; then  # root: /proc passes access(2) and takes no new file; other users fail the directory rule
  expect_line "--out on /proc" "vitddp: error: --out: '/proc/vitddp-r.h5' cannot be created (No such file or directory)" \
    $RUN4 --out /proc/vitddp-r.h5
fi
[ ! -e "$TMP/$LONG" ] && [ ! -e "$TMP/r.h5" ] && ok "the creation probes left no file" || bad "a creation probe left a file"
echo "{}" > "$TMP/old.json"
expect_line "existing --trace without --overwrite" "vitddp: error: --trace: '$TMP/old.json' exists (use --overwrite to replace it)" \
  $RUN4 --out "$TMP/r.h5" --trace "$TMP/old.json"
out=$(timeout 120 $MPIRUN -np 2 "$BIN" $RUN4 --out "$TMP/r2.h5" --trace "$TMP/old.json" --overwrite 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q traceEvents "$TMP/old.json" && [ ! -e "$TMP/old.json.tmp" ]; then ok "--overwrite replaces the trace"
else bad "trace --overwrite: rc=$rc $out"; fi
t0=$(date +%s)
expect_line "--save-weights = --out, with --overwrite" \
  "vitddp: error: --save-weights: '$TMP/base.h5' is also the --out file; give each output its own path" \
  $SMALL --warmup-steps 1 --steps 100000 --cooldown-steps 1 --out "$TMP/base.h5" --save-weights "$TMP/base.h5" --overwrite
[ $(( $(date +%s) - t0 )) -lt 60 ] && "$PY" -c "import h5py,sys; h5py.File(sys.argv[1],'r')['timing/forward']" "$TMP/base.h5" \
  && ok "refused at start-up; the results file is intact" || bad "--save-weights = --out: late or destroyed the results"
ln -s "$TMP/nowhere.json" "$TMP/dangling.json"
expect_line "dangling symbolic link" "vitddp: error: --trace: '$TMP/dangling.json' is a symbolic link to a missing file" \
  $RUN4 --out "$TMP/r.h5" --trace "$TMP/dangling.json" --overwrite
echo old > "$TMP/real.h5"
ln -s "$TMP/real.h5" "$TMP/alias.json"
expect_line "--trace through a symbolic link to the results file" \
  "vitddp: error: --trace: '$TMP/alias.json' is also the --out file; give each output its own path" \
  $RUN4 --out "$TMP/real.h5" --trace "$TMP/alias.json" --overwrite
expect_line "a checkpoint of the {step} pattern over the --init-from file" \
  "vitddp: error: --checkpoint-path: '$TMP/c-4.h5' is the --init-from file, an input of this run: it is never overwritten, not even with --overwrite" \
  $RUN4 --out "$TMP/r.h5" --init-from "$TMP/c-4.h5" --checkpoint-every 2 --checkpoint-path "$TMP/c-{step}.h5" --overwrite
cp "$TMP/c-2.h5" "$TMP/c-3.h5"
expect_line "the checkpoint a signal stop could write over the --init-from file" \
  "vitddp: error: --checkpoint-path: '$TMP/c-3.h5' is the --init-from file, an input of this run: it is never overwritten, not even with --overwrite" \
  $RUN4 --out "$TMP/r.h5" --init-from "$TMP/c-3.h5" --checkpoint-every 2 --checkpoint-path "$TMP/c-{step}.h5" --overwrite
expect_line "the checkpoint a signal stop could write over the trace" \
  "vitddp: error: --checkpoint-path: '$TMP/c-3.h5' is also the --trace file; give each output its own path" \
  $RUN4 --out "$TMP/r.h5" --trace "$TMP/c-3.h5" --checkpoint-every 2 --checkpoint-path "$TMP/c-{step}.h5" --overwrite
make_idx "$TMP/idx" 16 0 1 2 3 4 0 1 2 3 4 0 1 2 3 4 0
expect_line "--out over a data file" \
  "vitddp: error: --out: '$TMP/idx/train-labels-idx1-ubyte' is the --data file, an input of this run: it is never overwritten, not even with --overwrite" \
  $RUN4 --num-classes 5 --data idx:"$TMP/idx" --out "$TMP/idx/train-labels-idx1-ubyte" --overwrite
cp "$TMP/c-2.h5" "$TMP/same.h5"
out=$(timeout 120 $MPIRUN -np 2 "$BIN" $RUN4 --out "$TMP/r3.h5" --resume "$TMP/same.h5" --checkpoint-every 2 --checkpoint-path "$TMP/same.h5" 2>&1); rc=$?
step=$("$PY" -c "import h5py,sys; print(h5py.File(sys.argv[1],'r').attrs['step'])" "$TMP/same.h5" 2>&1)
if [ $rc -eq 0 ] && [ "$step" = "4" ]; then ok "the checkpoint path may be the --resume file (now at step $step)"; else bad "resume into itself: rc=$rc step=$step $out"; fi

# ---- 2. a full disk in each writer ----
# full_disk NAME PATTERN BYTES WANT_LINE ARGS...: the run fails (not 139, not 0) printing WANT_LINE
# (a fixed substring of one line), prints no HDF5 error dump and leaves no .tmp.
full_disk() {
  local name=$1 pattern=$2 bytes=$3 want=$4
  shift 4
  local out rc
  out=$(timeout 120 $MPIRUN -np 2 -x LD_PRELOAD="$SHIM" -x VITDDP_FAIL_WRITE_PATTERN="$pattern" \
        -x VITDDP_FAIL_WRITE_AFTER="$bytes" "$BIN" "$@" 2>&1); rc=$?
  FD_OUT=$out
  if [ $rc -ne 0 ] && [ $rc -ne 139 ] && [ $rc -ne 124 ] && grep -qF -- "$want" <<<"$out" && ! grep -q "HDF5-DIAG\|#000:\|Segmentation" <<<"$out" \
     && [ -z "$(ls "$TMP" | grep '\.tmp$')" ]; then ok "full disk: $name (exit $rc): $(grep -F -- "$want" <<<"$out" | head -1 | cut -c1-140)"
  else bad "full disk: $name: rc=$rc, wanted '$want'; tmp: $(ls "$TMP" | grep '\.tmp$'); $out"; fi
}
full_disk "checkpoint" "*/d1.ckpt.h5.tmp" 20000 \
  "[vitddp] error: checkpoint after step 1: '$TMP/d1.ckpt.h5.tmp': No space left on device" \
  $RUN4 --checkpoint-every 2 --out "$TMP/d1.h5"
got=$(h5_rows "$TMP/d1.h5")
[ "$got" = "2 checkpoint failed after step 1" ] && ok "results after a failed checkpoint: $got" || bad "results after a failed checkpoint: $got"
full_disk "--save-weights" "*/d2w.h5.tmp" 20000 "[vitddp] error: --save-weights: '$TMP/d2w.h5.tmp': No space left on device" \
  $RUN4 --out "$TMP/d2.h5" --save-weights "$TMP/d2w.h5"
grep -q MPI_ABORT <<<"$FD_OUT" && bad "--save-weights on a full disk: MPI_Abort instead of exit 1 on every rank" || ok "--save-weights on a full disk: every rank returns 1"
got=$(h5_rows "$TMP/d2.h5")
[ "$got" = "4 error on rank 0 after step 3 (see the log)" ] && [ ! -e "$TMP/d2w.h5" ] && ok "results after failed weights: $got" || bad "results after failed weights: $got"
full_disk "--trace" "*/d3.json.tmp" 1000 "[vitddp] error: --trace: cannot write '$TMP/d3.json.tmp': No space left on device" \
  $RUN4 --out "$TMP/d3.h5" --trace "$TMP/d3.json"
grep -q MPI_ABORT <<<"$FD_OUT" && bad "--trace on a full disk: MPI_Abort instead of exit 1 on every rank" || ok "--trace on a full disk: every rank returns 1"
got=$(h5_rows "$TMP/d3.h5")
[ "$got" = "4 error on rank 0 after step 3 (see the log)" ] && [ ! -e "$TMP/d3.json" ] && ok "results after a failed trace: $got" || bad "results after a failed trace: $got"
full_disk "the results file" "*/d4.h5" 300000 "error: '$TMP/d4.h5': No space left on device" \
  $SMALL --warmup-steps 1 --steps 400 --flush-every 1 --progress-every 1000 --out "$TMP/d4.h5"
got=$(h5_rows "$TMP/d4.h5")
n=${got%% *}
[[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -gt 0 ] && ok "the results file on a full disk opens with its $n flushed rows" || bad "results on a full disk: $got"

# ---- 3. NaN / Inf at load ----
T=encoder.layers.encoder_layer_0.mlp.0.weight
"$PY" - "$W" "$TMP/nan.h5" "$TMP/c-4.h5" "$TMP/inf.h5" "$T" <<'PY'
import shutil, sys, h5py, numpy as np
w, nan, c, inf, t = sys.argv[1:6]
shutil.copy(w, nan)
with h5py.File(nan, "r+") as f:
    d = f["params/" + t]; a = d[()]; a.flat[5] = np.nan; d[...] = a
shutil.copy(c, inf)
with h5py.File(inf, "r+") as f:
    d = f["params/heads.head.bias"]; a = d[()]; a.flat[0] = np.inf; d[...] = a
PY
n=$("$PY" -c "import h5py,sys; print(h5py.File(sys.argv[1],'r')['params/'+sys.argv[2]].size)" "$W" "$T")
expect_line "NaN in --init-from" \
  "vitddp: error: --init-from: HDF5 file '$TMP/nan.h5': dataset /params/$T holds NaN (element 5 of $n)" \
  $RUN4 --out "$TMP/n1.h5" --init-from "$TMP/nan.h5"
expect_line "Inf in a --resume checkpoint" \
  "vitddp: error: --resume: HDF5 file '$TMP/inf.h5': dataset /params/heads.head.bias holds Inf (element 0 of 5)" \
  $SMALL --warmup-steps 1 --steps 4 --cooldown-steps 1 --out "$TMP/n2.h5" --resume "$TMP/inf.h5"

# ---- 4. messages that name the file, the sample and the value ----
make_idx "$TMP/lab" 16 0 1 2 7 4 0 1 2 3 4 0 1 2 3 4 0
expect_line "a label that does not fit" \
  "vitddp: error: --data: label 7 of sample 3 in '$TMP/lab/train-labels-idx1-ubyte' does not fit the model's 5 classes (set --num-classes)" \
  $RUN4 --num-classes 5 --data idx:"$TMP/lab" --out "$TMP/m1.h5"
make_idx "$TMP/few" 6 0 1 2 3 4 0
expect_line "fewer images than one batch" \
  "vitddp: error: --data: 6 images are fewer than one batch of 4 per rank: 2 rank(s) need at least 8 images ('$TMP/few/train-images-idx3-ubyte')" \
  $RUN4 --num-classes 5 --data idx:"$TMP/few" --out "$TMP/m2.h5"
# The watchdog with a 1 ms timeout (it fires at its first check, or once the peer is stopped with
# SIGSTOP): the timeout printed as given.
$MPIRUN -np 2 "$BIN" $SMALL --warmup-steps 1 --steps 1000000 --progress-every 1000000 --step-timeout 0.001 \
  --out "$TMP/wd.h5" > "$TMP/wd.log" 2>&1 &
pid=$!
sleep 3
victim=$(pgrep -f "vitddp.*$TMP/wd.h5" | grep -v "^$pid$" | tail -1)
[ -n "$victim" ] && kill -STOP "$victim"
for _ in $(seq 100); do grep -q "did not finish" "$TMP/wd.log" && break; sleep 0.1; done
[ -n "$victim" ] && kill -CONT "$victim"
timeout 60 tail --pid=$pid -f /dev/null; wait $pid; rc=$?
if [ $rc -ne 0 ] && grep -q "error: step [0-9]* did not finish within 0.001 s (--step-timeout)" "$TMP/wd.log"; then
  ok "watchdog prints the timeout as given: $(grep -o 'did not finish within [^(]*' "$TMP/wd.log" | head -1)"
else bad "watchdog: rc=$rc $(tail -5 "$TMP/wd.log")"; fi

finish
