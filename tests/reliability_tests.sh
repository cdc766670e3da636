#!/usr/bin/env bash
# Failure handling of the real binary on the CPU backend (issue "Reliability"): every case ends
# every rank promptly with a clear message, a non-zero exit, and a readable results file.
# Usage: reliability_tests.sh <vitddp> <mpirun>
set -u
BIN=$1
source "$(dirname "$0")/test_util.sh" "$2"
SMALL="--backend cpu --model vit_micro --batch-size 4 --first-bucket-mb 0.0005 --bucket-cap-mb 0.002"
steps_in() { h5ls -r "$1" 2>/dev/null | grep '^/timing/forward ' | sed 's/.*{[0-9]*, \([0-9]*\)\/.*/\1/'; }
attr_of() { h5dump -a "/$2" "$1" 2>/dev/null | grep -o '"[^"]*"' | tail -1; }

# 1. A NaN in rank 0's batch at step 2 (0-based, as everywhere), --on-nonfinite skip: the run goes on, the step is flagged on
#    both ranks (the all-reduce spreads it), exit 0.
out=$(timeout 120 $MPIRUN -np 2 "$BIN" $SMALL --warmup-steps 1 --steps 4 --debug-nan-at-step 2 --on-nonfinite skip \
      --out "$TMP/skip.h5" 2>&1); rc=$?
flags=$(h5dump -d /training/nonfinite "$TMP/skip.h5" 2>/dev/null | grep -A3 "DATA {" | tr -d ' \n')
if [ $rc -eq 0 ] && grep -q "step 2: non-finite loss or gradients" <<<"$out" && [[ "$flags" == *"(0,0):0,0,1,0,0,0,(1,0):0,0,1,0,0,0"* ]]; then
  ok "NaN at step 2 skipped on both ranks, run completed (flags $flags)"
else bad "nonfinite skip: rc=$rc flags=$flags out=$out"; fi

# 2. Same with --on-nonfinite stop: exit code 4 on every rank, the file holds steps 0-2, stop_reason
#    names step 2.
start=$(date +%s.%N)
out=$(timeout 120 $MPIRUN -np 2 "$BIN" $SMALL --warmup-steps 1 --steps 4 --debug-nan-at-step 2 --out "$TMP/stop.h5" 2>&1); rc=$?
n=$(steps_in "$TMP/stop.h5")
if [ $rc -ne 0 ] && [ "$n" = "3" ] && grep -q "step 2: .*stopping (--on-nonfinite stop)" <<<"$out" &&
   [ "$(attr_of "$TMP/stop.h5" stop_reason)" = '"non-finite loss or gradients at step 2"' ]; then ok "NaN with stop: exit $rc, file holds $n steps, reason $(attr_of "$TMP/stop.h5" stop_reason)"
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

# 9-11. A rank that errors inside a step while its peer is inside the step's collectives
#    (--debug-fail-*): the job ends non-zero well within --step-timeout, the message names the rank
#    and the reason in one line, and the file opens (h5py) holding every step before the failing one.
PY=/usr/bin/python3
h5_steps() { $PY -c "import h5py,sys; f=h5py.File(sys.argv[1],'r'); print(f['timing/forward'].shape[1], f.attrs.get('stop_reason','-'))" "$1" 2>&1 | tail -1; }
fail_case() {  # fail_case NAME RANK MODE EXPECTED-MESSAGE; dt: seconds from the fault's message to the job's end
  local t0 tf="" rc dt got pid
  t0=$(date +%s.%N)
  timeout 60 $MPIRUN -np 2 "$BIN" $SMALL --warmup-steps 1 --steps 20 --step-timeout 10 --debug-fail-at-step 3 \
    --debug-fail-rank "$2" --debug-fail-mode "$3" --out "$TMP/$1.h5" > "$TMP/$1.log" 2>&1 &
  pid=$!
  while kill -0 $pid 2>/dev/null; do
    [ -z "$tf" ] && grep -q "fails in step 3" "$TMP/$1.log" && tf=$(date +%s.%N)
    sleep 0.05
  done
  wait $pid; rc=$?
  dt=$(echo "$(date +%s.%N) - ${tf:-$t0}" | bc)
  got=$(h5_steps "$TMP/$1.h5")
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && (( $(echo "$dt < 10" | bc) )) && grep -q "$4" "$TMP/$1.log" && [[ "$got" == "3 "* ]]; then
    ok "rank $2 fails in step 3 (--debug-fail-mode $3): exit $rc ${dt}s after the fault, file: $got, $(grep -o "\[vitddp rank $2\] error: .*" "$TMP/$1.log" | head -1 | cut -c1-110)"
  else bad "fail $3 on rank $2: rc=$rc dt=$dt file=$got log=$(tail -8 "$TMP/$1.log")"; fi
}
fail_case throw1 1 throw "\[vitddp rank 1\] error: debug fault injection: rank 1 fails in step 3 (--debug-fail-mode throw)"
fail_case exit1 1 exit "\[vitddp rank 1\] error: debug fault injection: rank 1 fails in step 3: exiting with status 1"
fail_case throw0 0 throw "\[vitddp rank 0\] error: debug fault injection: rank 0 fails in step 3"
if [[ "$(h5_steps "$TMP/throw0.h5")" == *"error on rank 0 after step 2"* ]]; then ok "rank 0's own error: stop_reason recorded before the file was closed"
else bad "rank 0 error: stop_reason missing: $(h5_steps "$TMP/throw0.h5")"; fi
out=$(timeout 60 $MPIRUN -np 2 "$BIN" $SMALL --debug-fail-at-step 1 --debug-fail-mode nccl-abort --out "$TMP/ncclcpu.h5" 2>&1); rc=$?
if [ $rc -eq 2 ] && grep -q "nccl-abort: needs the GPU backend" <<<"$out"; then ok "nccl-abort on the CPU backend: refused, exit 2"
else bad "nccl-abort cpu: rc=$rc out=$out"; fi

# 12. --dry-run --backend cpu (both builds): the host memory of one CPU rank, exit 0, no results file.
out=$(timeout 60 "$BIN" --dry-run --backend cpu --model vit_l_32 --batch-size 32 --out "$TMP/dryc.h5" 2>&1); rc=$?
if [ $rc -eq 0 ] && [ "$(head -1 <<<"$out")" = "[vitddp] host memory per rank of the CPU backend: vit_l_32 (306535400 parameters), batch 32, fp32" ] &&
   grep -q "^  parameters  *1226141600 bytes" <<<"$out" && grep -q "^  activations  *[1-9][0-9]* bytes" <<<"$out" &&
   grep -q "^  peak" <<<"$out" && [ ! -e "$TMP/dryc.h5" ]; then
  ok "--dry-run --backend cpu: $(grep '^  peak' <<<"$out" | tr -s ' ' | cut -c1-60)"
else bad "dry-run cpu: rc=$rc out=$out"; fi
# 12b. The CPU backend refuses, before it allocates, when the ranks of this host need more host
# memory than MemAvailable (faked here by VITDDP_TEST_MEMAVAILABLE_KB, read by that check only):
# one line, exit 2 on every rank, no results file.
want="vitddp: error: --backend cpu: vit_tiny at batch 32 needs 0.02 GiB of host memory per rank, 2 ranks on this host need 0.05 GiB, but only 0.03 GiB is available (use a smaller --model or --batch-size)"
out=$(VITDDP_TEST_MEMAVAILABLE_KB=30000 timeout 60 $MPIRUN -np 2 "$BIN" --backend cpu --model vit_tiny --batch-size 32 --steps 1 --out "$TMP/oom.h5" 2>&1); rc=$?
if [ $rc -eq 2 ] && [ "$(grep -c 'vitddp: error' <<<"$out")" = 1 ] && grep -qxF "$want" <<<"$out" &&
   ! grep -q '^\[vitddp\] step' <<<"$out" && [ ! -e "$TMP/oom.h5" ]; then
  ok "host memory short for 2 CPU ranks: refused, exit 2"
else bad "host memory refusal: rc=$rc out=$out"; fi

if [ "${VITDDP_GPU_BUILT:-1}" = 1 ]; then
# 12c. --dry-run --backend gpu: the device memory estimate without a GPU, exit 0, no results file.
out=$(timeout 60 "$BIN" --dry-run --backend gpu --model vit_l_32 --batch-size 32 --out "$TMP/dry.h5" 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q "parameters .* 1226141600 bytes" <<<"$out" && grep -q "^  peak" <<<"$out" && [ ! -e "$TMP/dry.h5" ]; then
  ok "--dry-run: $(grep '^  peak' <<<"$out" | tr -s ' ' | cut -c1-60)"
else bad "dry-run: rc=$rc out=$out"; fi
else
# 12'. The CPU-only build (VITDDP_GPU_BUILT=0, set by tests/CMakeLists.txt): --dry-run
# --backend gpu and --backend gpu are refused with one line and exit 2 before any work (no
# results file, no training line); --backend auto runs the CPU backend, and --dry-run with it
# gives the CPU backend's host memory.
nogpu="this vitddp was built without the GPU backend (VITDDP_GPU=OFF)"
out=$(timeout 60 "$BIN" --dry-run --backend gpu --model vit_l_32 --batch-size 32 --out "$TMP/dry.h5" 2>&1); rc=$?
if [ $rc -eq 2 ] && [ "$out" = "vitddp: error: --dry-run: $nogpu" ] && [ ! -e "$TMP/dry.h5" ]; then
  ok "--dry-run --backend gpu in the CPU-only build: refused, exit 2"
else bad "dry-run cpu-only: rc=$rc out=$out"; fi
out=$(timeout 60 "$BIN" --dry-run --model vit_l_32 --batch-size 32 --out "$TMP/dry.h5" 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q "^\[vitddp\] host memory per rank of the CPU backend: vit_l_32" <<<"$out" && [ ! -e "$TMP/dry.h5" ]; then
  ok "--dry-run (auto) in the CPU-only build: the CPU backend's host memory"
else bad "dry-run auto cpu-only: rc=$rc out=$out"; fi
out=$(timeout 60 $MPIRUN -np 2 "$BIN" ${SMALL/--backend cpu/--backend gpu} --steps 1 --out "$TMP/nogpu.h5" 2>&1); rc=$?
if [ $rc -eq 2 ] && [ "$(grep -c "$nogpu" <<<"$out")" -eq 1 ] && grep -qx "vitddp: error: --backend gpu: $nogpu" <<<"$out" &&
   ! grep -q '^\[vitddp\]' <<<"$out" && [ ! -e "$TMP/nogpu.h5" ]; then
  ok "--backend gpu in the CPU-only build: one line, exit 2"
else bad "backend gpu cpu-only: rc=$rc out=$out"; fi
out=$(timeout 120 $MPIRUN -np 2 "$BIN" ${SMALL/--backend cpu/--backend auto} --warmup-steps 0 --steps 1 --out "$TMP/auto.h5" 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q "this build has no GPU backend: running the CPU backend" <<<"$out" && grep -q "backend cpu" <<<"$out" &&
   [ "$(attr_of "$TMP/auto.h5" backend)" = '"cpu"' ]; then
  ok "--backend auto in the CPU-only build: the CPU backend"
else bad "backend auto cpu-only: rc=$rc out=$out"; fi
fi

finish
