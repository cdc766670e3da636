#!/usr/bin/env bash
# Failure handling of the real binary on the CPU backend (issue "Reliability"): every case ends
# every rank promptly with a clear message, a non-zero exit, and a readable results file.
# Usage: reliability_tests.sh <vitddp> <mpirun>
set -u
BIN=$1
MPIRUN="$2 --oversubscribe --allow-run-as-root --bind-to none -x NCCL_NVLS_ENABLE=0"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
pass=0; fail=0
ok() { pass=$((pass + 1)); echo "ok   - $1"; }
bad() { fail=$((fail + 1)); echo "FAIL - $1"; }
SMALL="--backend cpu --model vit_micro --batch-size 4 --first-bucket-mb 0.0005 --bucket-cap-mb 0.002"
steps_in() { h5ls -r "$1" 2>/dev/null | grep '^/timing/forward ' | sed 's/.*{[0-9]*, \([0-9]*\)\/.*/\1/'; }
attr_of() { h5dump -a "/$2" "$1" 2>/dev/null | grep -o '"[^"]*"' | tail -1; }

# 1. A NaN in rank 0's batch at step 3, --on-nonfinite skip: the run goes on, the step is flagged on
#    both ranks (the all-reduce spreads it), exit 0.
out=$(timeout 120 $MPIRUN -np 2 "$BIN" $SMALL --warmup-steps 1 --steps 4 --debug-nan-at-step 2 --on-nonfinite skip \
      --out "$TMP/skip.h5" 2>&1); rc=$?
flags=$(h5dump -d /training/nonfinite "$TMP/skip.h5" 2>/dev/null | grep -A3 "DATA {" | tr -d ' \n')
if [ $rc -eq 0 ] && grep -q "non-finite loss or gradients" <<<"$out" && [[ "$flags" == *"(0,0):0,0,1,0,0,0,(1,0):0,0,1,0,0,0"* ]]; then
  ok "NaN at step 3 skipped on both ranks, run completed (flags $flags)"
else bad "nonfinite skip: rc=$rc flags=$flags out=$out"; fi

# 2. Same with --on-nonfinite stop: exit code 4 on every rank, the file holds steps 1-3.
start=$(date +%s.%N)
out=$(timeout 120 $MPIRUN -np 2 "$BIN" $SMALL --warmup-steps 1 --steps 4 --debug-nan-at-step 2 --out "$TMP/stop.h5" 2>&1); rc=$?
n=$(steps_in "$TMP/stop.h5")
if [ $rc -ne 0 ] && [ "$n" = "3" ] && grep -q "stopping (--on-nonfinite stop)" <<<"$out"; then ok "NaN with stop: exit $rc, file holds $n steps, reason $(attr_of "$TMP/stop.h5" stop_reason)"
else bad "nonfinite stop: rc=$rc steps=$n out=$out"; fi

# 3. SIGTERM to mpirun mid-run (what Slurm sends at the time limit): every rank finishes its step,
#    the file is closed with the steps done so far, exit non-zero.
$MPIRUN -np 2 "$BIN" $SMALL --warmup-steps 1 --steps 100000 --progress-every 1000 --out "$TMP/term.h5" > "$TMP/term.log" 2>&1 &
pid=$!
sleep 4
t0=$(date +%s.%N)
kill -TERM $pid
wait $pid; rc=$?
dt=$(echo "$(date +%s.%N) - $t0" | bc)
n=$(steps_in "$TMP/term.h5")
reason=$(attr_of "$TMP/term.h5" stop_reason)
if [ $rc -ne 0 ] && [ -n "$n" ] && [ "$n" -gt 0 ] && [[ "$reason" == *signal* ]]; then ok "SIGTERM: exit $rc after ${dt}s, file closed with $n steps, reason $reason"
else bad "SIGTERM: rc=$rc steps=$n reason=$reason log=$(tail -5 "$TMP/term.log")"; fi

# 4. SIGKILL of one rank: mpirun ends the job, exit non-zero; the file opens and holds the flushed steps.
$MPIRUN -np 2 "$BIN" $SMALL --warmup-steps 1 --steps 100000 --progress-every 1000 --out "$TMP/kill.h5" > "$TMP/kill.log" 2>&1 &
pid=$!
sleep 4
victim=$(pgrep -f "vitddp.*$TMP/kill.h5" | grep -v "^$pid$" | tail -1)
t0=$(date +%s.%N)
kill -KILL "$victim"
timeout 60 tail --pid=$pid -f /dev/null; wait $pid; rc=$?
dt=$(echo "$(date +%s.%N) - $t0" | bc)
n=$(steps_in "$TMP/kill.h5")
if [ $rc -ne 0 ] && [ -n "$n" ] && [ "$n" -gt 0 ]; then ok "SIGKILL of a rank: job ended in ${dt}s (exit $rc), file opens with $n steps"
else bad "SIGKILL: rc=$rc steps=$n log=$(tail -5 "$TMP/kill.log")"; fi

# 5. Copies started without an MPI launcher while the scheduler says 2 tasks: clear error, exit 2.
out=$(SLURM_NTASKS=2 SLURM_PROCID=0 timeout 60 "$BIN" $SMALL --out "$TMP/nolauncher.h5" 2>&1); rc=$?
if [ $rc -eq 2 ] && grep -q "launcher reports 2 tasks" <<<"$out"; then ok "no MPI launcher, SLURM_NTASKS=2: exit 2"
else bad "no launcher: rc=$rc out=$out"; fi

# 6. Ranks with different options (an MPMD launch): refused before any work, exit 2.
out=$(timeout 60 $2 --oversubscribe --allow-run-as-root -np 1 "$BIN" $SMALL --out "$TMP/mpmd.h5" : \
      -np 1 "$BIN" $SMALL --lr 0.5 --out "$TMP/mpmd.h5" 2>&1); rc=$?
if [ $rc -eq 2 ] && grep -q "different options" <<<"$out"; then ok "ranks with different options: exit 2"
else bad "mpmd: rc=$rc out=$out"; fi

# 7. A corrupt data set: exit 2 naming the file, before any training.
mkdir -p "$TMP/bad"; echo "garbage" > "$TMP/bad/train-images-idx3-ubyte"; echo "x" > "$TMP/bad/train-labels-idx1-ubyte"
out=$(timeout 60 $MPIRUN -np 2 "$BIN" $SMALL --data idx:"$TMP/bad" --out "$TMP/bad.h5" 2>&1); rc=$?
if [ $rc -eq 2 ] && grep -q "train-images-idx3-ubyte" <<<"$out" && [ ! -e "$TMP/bad.h5" ]; then ok "corrupt data set: exit 2, $(grep -o 'error: .*' <<<"$out" | head -1 | cut -c1-100)"
else bad "corrupt data: rc=$rc out=$out"; fi

# 8. Two runs at the same output path: the second refuses and the first's file is untouched.
$MPIRUN -np 2 "$BIN" $SMALL --warmup-steps 1 --steps 100000 --progress-every 1000 --out "$TMP/shared.h5" > "$TMP/first.log" 2>&1 &
pid=$!
sleep 3
out=$(timeout 60 $MPIRUN -np 2 "$BIN" $SMALL --overwrite --out "$TMP/shared.h5" 2>&1); rc=$?
kill -TERM $pid; wait $pid
n=$(steps_in "$TMP/shared.h5")
if [ $rc -eq 2 ] && [ -n "$n" ] && [ "$n" -gt 0 ]; then ok "second run on the same path (even with --overwrite) refused: $(grep -o 'error: .*' <<<"$out" | head -1 | cut -c1-110); first file holds $n steps"
else bad "concurrent: rc=$rc steps=$n out=$out"; fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
