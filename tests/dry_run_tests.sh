#!/usr/bin/env bash
# --dry-run of the real binary on the CPU backend gives the verdict of the run it stands for: each
# input or output the run refuses before training (--resume of a missing file, of a file that is
# not a checkpoint, of a checkpoint of another rank count, model or batch size; an existing or
# unplaceable --out; --init-from; --data; checkpoint files) is refused by the dry run too, on 2
# ranks (1 for the rank-count case), with the run's own error line and exit 2; a dry run that
# passes exits 0 and so does the run. No dry run creates, removes or modifies a file: the scratch
# folder's listing (paths, sizes, modification times, content hashes) is the same after it.
# Usage: dry_run_tests.sh <vitddp> <mpirun>
set -u
BIN=$(readlink -f "$1")
source "$(dirname "$0")/test_util.sh" "$2"
SMALL="--backend cpu --model vit_micro --batch-size 4 --warmup-steps 2 --steps 4 --cooldown-steps 2 --first-bucket-mb 0.0005 --bucket-cap-mb 0.002"

# snapshot: every entry under $TMP with its size and modification time (files; a directory's
# changes when the checks create and remove a trial output in it), and every file's md5.
snapshot() {
  find "$TMP" -type d -printf '%p\n' -o -printf '%p %s %T@\n' | sort
  find "$TMP" -type f -exec md5sum {} + | sort
}

# A checkpoint after step 3 (file ck-4.h5) and after step 7 (ck-8.h5) of an 8-step run on 2
# ranks, and a weights file, for the cases below.
out=$(timeout 300 $MPIRUN -np 2 "$BIN" $SMALL --checkpoint-every 4 --checkpoint-path "$TMP/ck-{step}.h5" \
      --save-weights "$TMP/weights.h5" --out "$TMP/first.h5" 2>&1); rc=$?
if [ $rc -ne 0 ] || [ ! -f "$TMP/ck-4.h5" ] || [ ! -f "$TMP/weights.h5" ]; then
  bad "setup run with checkpoints: rc=$rc: $out"
  finish
  exit 1
fi
CK="$TMP/ck-4.h5"

# same_verdict NAME WANT ARGS...: on ${NP:-2} ranks, the run with ${BASE:-$SMALL} ARGS and the dry
# run with the same ARGS both exit 2 with one identical error line containing WANT; the dry run leaves
# $TMP as it was.
same_verdict() {
  local name=$1 want=$2
  shift 2
  local before after dry drc run rrc dline rline
  before=$(snapshot)
  dry=$(timeout 120 $MPIRUN -np "${NP:-2}" "$BIN" ${BASE:-$SMALL} "$@" --dry-run 2>&1); drc=$?
  after=$(snapshot)
  run=$(timeout 120 $MPIRUN -np "${NP:-2}" "$BIN" ${BASE:-$SMALL} "$@" 2>&1); rrc=$?
  dline=$(grep '^vitddp: error: ' <<<"$dry")
  rline=$(grep '^vitddp: error: ' <<<"$run")
  if [ $drc -eq 2 ] && [ $rrc -eq 2 ] && [ "$(grep -c . <<<"$dline")" = 1 ] && [ "$dline" = "$rline" ] &&
     grep -qF -- "$want" <<<"$dline" && ! grep -q '^  peak' <<<"$dry" && [ "$before" = "$after" ]; then
    ok "$name: dry run and run exit 2 with '$(cut -c16-150 <<<"$dline")'"
  else
    bad "$name: dry rc=$drc, run rc=$rrc, files unchanged: $([ "$before" = "$after" ] && echo yes || echo no), wanted '$want'; dry: $dry; run: $run"
  fi
}

# --resume
same_verdict "--resume of a missing file" "--resume: cannot open HDF5 file '$TMP/none.h5': no such file" \
  --resume "$TMP/none.h5" --out "$TMP/r1.h5"
same_verdict "--resume of a weights file" "is not a vitddp checkpoint" --resume "$TMP/weights.h5" --out "$TMP/r2.h5"
echo "not hdf5" > "$TMP/junk.h5"
same_verdict "--resume of a file that is not HDF5" "--resume: " --resume "$TMP/junk.h5" --out "$TMP/r3.h5"
NP=1 same_verdict "--resume on another number of ranks" "ranks: the checkpoint was written by 2 rank(s), this run has 1" \
  --resume "$CK" --out "$TMP/r4.h5"
BASE=${SMALL/vit_micro/vit_tiny} same_verdict "--resume with another model" \
  "--model: the checkpoint was written with 'vit_micro', this run has 'vit_tiny'" --resume "$CK" --out "$TMP/r5.h5"
BASE=${SMALL/--batch-size 4/--batch-size 8} same_verdict "--resume with another batch size" \
  "--batch-size: the checkpoint was written with '4', this run has '8'" --resume "$CK" --out "$TMP/r6.h5"
same_verdict "--resume past the end" "--resume: the checkpoint is at step 8 but this run has 8 steps" \
  --resume "$TMP/ck-8.h5" --out "$TMP/r7.h5"
# --out and the other outputs
same_verdict "existing --out without --overwrite" "--out: '$TMP/first.h5' exists (use --overwrite to replace it)" \
  --out "$TMP/first.h5"
same_verdict "--out in a missing directory" "--out: directory '$TMP/no/dir' does not exist" --out "$TMP/no/dir/x.h5"
same_verdict "--out under a file" "--out: '$TMP/junk.h5' is not a directory" --out "$TMP/junk.h5/x.h5"
mkdir "$TMP/outdir"
same_verdict "--out is a directory" "--out: '$TMP/outdir' is a directory" --out "$TMP/outdir" --overwrite
same_verdict "--out is the --resume file" "--out: '$CK' is the --resume file, an input of this run" \
  --resume "$CK" --out "$CK" --overwrite
same_verdict "existing checkpoint file" "--checkpoint-path: '$TMP/ck-4.h5' exists (use --overwrite" \
  --checkpoint-every 4 --checkpoint-path "$TMP/ck-{step}.h5" --out "$TMP/o1.h5"
same_verdict "existing --save-weights file" "--save-weights: '$TMP/weights.h5' exists" \
  --save-weights "$TMP/weights.h5" --out "$TMP/o2.h5"
same_verdict "--trace in a missing directory" "--trace: directory '$TMP/no' does not exist" \
  --trace "$TMP/no/t.json" --out "$TMP/o3.h5"
same_verdict "--out at --trace's scratch file" "--trace (scratch file): '$TMP/t.json.tmp' is also the --out file" \
  --trace "$TMP/t.json" --out "$TMP/t.json.tmp"
echo x > "$TMP/sig-3.h5"  # a file of the pattern's form at a step a signal stop could checkpoint
same_verdict "a file a signal-stop checkpoint would replace" "--checkpoint-path (a signal stop at step 3): '$TMP/sig-3.h5' exists" \
  --checkpoint-every 4 --checkpoint-path "$TMP/sig-{step}.h5" --out "$TMP/o4.h5"
mkfifo "$TMP/fifo.h5"
same_verdict "--init-from a FIFO (opening it would block)" "--init-from: '$TMP/fifo.h5' is not a regular file (a FIFO)" \
  --init-from "$TMP/fifo.h5" --out "$TMP/o5.h5"
# With --overwrite, a results file another run is writing (HDF5's flock held; here a process that
# holds the same lock, flock(1) on a read-only descriptor).
(exec 9<"$TMP/first.h5"; flock -x 9; exec sleep 300) &
holder=$!
sleep 0.5
same_verdict "--overwrite of a file open for writing" "--out: '$TMP/first.h5' is open for writing by another run" \
  --out "$TMP/first.h5" --overwrite
kill "$holder"
wait "$holder" 2>/dev/null
mkdir "$TMP/ro"
chmod 555 "$TMP/ro"
if [ ! -w "$TMP/ro" ]; then  # not root (root passes permission bits: the case does not exist for it)
  same_verdict "--out in a read-only directory" "--out: directory '$TMP/ro' is not writable" --out "$TMP/ro/x.h5"
fi
# --init-from, --data, launch
same_verdict "--init-from of a missing file" "--init-from: cannot open HDF5 file '$TMP/none.h5'" \
  --init-from "$TMP/none.h5" --out "$TMP/i1.h5"
BASE=${SMALL/vit_micro/vit_tiny} same_verdict "--init-from of another model's weights" "--init-from: " \
  --init-from "$TMP/weights.h5" --out "$TMP/i2.h5"
same_verdict "--data of a missing directory" "--data: directory '$TMP/nope' does not exist" --data "idx:$TMP/nope" \
  --out "$TMP/d1.h5"
mkdir "$TMP/emptydata"
same_verdict "--data of a directory without IDX files" "--data: " --data "idx:$TMP/emptydata" --num-classes 10 \
  --out "$TMP/d2.h5"
BASE="--backend cpu --model vit_micro" same_verdict "--no-ddp on 2 ranks" "--no-ddp: trains one replica without communication; run it with 1 rank (got 2)" \
  --no-ddp --out "$TMP/l1.h5"

# dry_ok NAME ARGS...: the dry run on 2 ranks exits 0 with the memory report printed once and
# leaves $TMP as it was.
dry_ok() {
  local name=$1
  shift
  local before after out rc
  before=$(snapshot)
  out=$(timeout 120 $MPIRUN -np 2 "$BIN" $SMALL "$@" --dry-run 2>&1); rc=$?
  after=$(snapshot)
  if [ $rc -eq 0 ] && [ "$(grep -c '^  peak' <<<"$out")" = 1 ] && ! grep -q 'error' <<<"$out" && [ "$before" = "$after" ]; then
    ok "$name: dry run exit 0, no file created or changed"
  else bad "$name: rc=$rc, files unchanged: $([ "$before" = "$after" ] && echo yes || echo no): $out"; fi
}

# A valid resume: the dry run passes, touches neither the checkpoint nor anything else, and the run
# it stands for passes too.
RESUME=(--resume "$CK" --checkpoint-every 4 --checkpoint-path "$TMP/res-{step}.h5" --out "$TMP/res.h5")
dry_ok "valid --resume on 2 ranks" "${RESUME[@]}"
out=$(timeout 300 $MPIRUN -np 2 "$BIN" $SMALL "${RESUME[@]}" 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q "resuming from .*ck-4.h5 at step 4 of 8" <<<"$out" && [ -f "$TMP/res.h5" ] && [ -f "$TMP/res-8.h5" ]; then
  ok "the run of the valid dry run: exit 0, resumed at step 4"
else bad "the run of the valid dry run: rc=$rc: $out"; fi
dry_ok "--init-from and --save-weights, new paths" --init-from "$TMP/weights.h5" --save-weights "$TMP/w2.h5" \
  --trace "$TMP/t2.json" --out "$TMP/new.h5"
# With --overwrite an existing results file is neither truncated nor rewritten by the dry run.
dry_ok "existing --out with --overwrite" --out "$TMP/first.h5" --overwrite
# Without --out the run writes vitddp-<model>-np<N>-<time>.h5 in the working directory: the dry
# run checks that place and creates nothing there.
mkdir "$TMP/cwd"
before=$(snapshot)
out=$(cd "$TMP/cwd" && timeout 120 $MPIRUN -np 2 "$BIN" $SMALL --dry-run 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q '^  peak' <<<"$out" && [ -z "$(ls -A "$TMP/cwd")" ] && [ "$before" = "$(snapshot)" ]; then
  ok "dry run without --out: exit 0, nothing written in the working directory"
else bad "dry run without --out: rc=$rc, cwd: $(ls -A "$TMP/cwd"): $out"; fi

finish
