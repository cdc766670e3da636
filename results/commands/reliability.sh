#!/usr/bin/env bash
# The failure cases that need GPUs, on a machine with 2 GPUs. Part 1 (signals/): a batch that does
# not fit, more ranks than GPUs, one GPU per task, two tasks on one GPU, NaN skipped, SIGTERM to
# mpirun, SIGKILL and SIGSTOP (a hang) of one rank, --no-overlap. Part 2 (faults/): out of GPU
# memory with the whole need (vit_h_14), the --dry-run estimate against a real run, and a rank that
# errors inside a step (--debug-fail-mode throw | exit | nccl-abort, over NVLink and over sockets)
# while its peer is inside the step's all-reduce. For each: exit code, seconds to the end of the job,
# what the results file held, the first error line. The CPU-backend cases are
# tests/reliability_tests.sh (ctest, runs in CI).
# Usage: bash results/commands/reliability.sh OUT   |   bash results/commands/reliability.sh --readme DIR
#   GPU_TESTS=build/tests/gpu_tests (optional: the memory-estimate tests).
# Writes into OUT: signals.log, faults.log (the tables), signals/ and faults/ (each run's log and
# HDF5 file, the files packed into h5.tar.xz), log.txt, README.md. About 6 minutes.
TOPIC=reliability
TITLE="Failure cases on 2 GPUs: what every rank does, how fast the job ends, what the file holds"
NEED_GPUS=2
GPU_TESTS=${GPU_TESTS:-build/tests/gpu_tests}
about() {
  cat <<'MD'
Each failure is provoked on purpose (bad input, signals, killed or hung ranks, injected faults,
NaN) on 2 GPUs with ViT-L/32 or ViT-B/32; the tables give the exit code, the time from the trigger
(or from the start, for start-up errors) until mpirun returned, what the results file held
afterwards and the first error line. The tables are read from the scripts' logs
(`signals.log`, `faults.log`), so they stand as measured.
MD
}
includes() {
  local f
  for f in signals faults; do
    [ -s "$1/$f.log" ] || continue
    { echo "## ${f^} (\`$f.log\`)"; echo; grep -E '^\| ' "$1/$f.log"; echo; } > "$1/${f}_table.md"
    echo "$1/${f}_table.md"
  done
}
packdir() { local o=$OUT; OUT=$1; pack; OUT=$o; }
experiment() {
  local D t rc pid victim B=$VITDDP
  D=$OUT/signals; mkdir -p "$D"
  {
now() { date +%s.%N; }
steps_of() { "$PY" -c "import h5py,sys; f=h5py.File(sys.argv[1]); print(f['timing/forward'].shape[1], f.attrs.get('stop_reason','-'))" "$1" 2>&1 | tail -1; }
report() {  # report CASE RC T0 FILE LOG
  echo "| $1 | exit $2 | $("$PY" -c "import sys,time; print(f\"{time.time()-float(sys.argv[1]):.1f}\")" $3) s | $( [ -e "$4" ] && steps_of "$4" || echo 'no file') | $(grep -hoE '(error|warning): .{0,150}' "$5" | head -1) |"
}
echo "| case | exit | time to end | file: steps, stop_reason | message |"
echo "| --- | --- | --- | --- | --- |"
t=$(now); "${MPI[@]}" -np 2 "$B" --batch-size 40000 --steps 2 --out $D/oom.h5 > $D/oom.log 2>&1; rc=$?
report "batch that does not fit (--batch-size 40000)" $rc $t $D/oom.h5 $D/oom.log
t=$(now); "${MPI[@]}" -np 3 --oversubscribe "$B" --steps 2 --out $D/np3.h5 > $D/np3.log 2>&1; rc=$?
report "3 ranks on a 2-GPU node" $rc $t $D/np3.h5 $D/np3.log
t=$(now); "${MPI[@]}" -np 2 bash -c "CUDA_VISIBLE_DEVICES=\$OMPI_COMM_WORLD_LOCAL_RANK exec $VITDDP --warmup-steps 2 --steps 5 --out $D/pertask.h5" > $D/pertask.log 2>&1; rc=$?
report "one GPU per task (CUDA_VISIBLE_DEVICES=local rank)" $rc $t $D/pertask.h5 $D/pertask.log
grep -E "NCCL transport|steps/s" $D/pertask.log | sed 's/^/    /'
t=$(now); "${MPI[@]}" -np 2 bash -c "CUDA_VISIBLE_DEVICES=0 exec $VITDDP --steps 2 --out $D/same.h5" > $D/same.log 2>&1; rc=$?
report "both tasks given GPU 0" $rc $t $D/same.h5 $D/same.log
t=$(now); "${MPI[@]}" -np 2 "$B" --warmup-steps 1 --steps 6 --debug-nan-at-step 3 --on-nonfinite skip --out $D/nan.h5 > $D/nan.log 2>&1; rc=$?
report "NaN in rank 0's batch at step 4, --on-nonfinite skip" $rc $t $D/nan.h5 $D/nan.log
"$PY" -c "import h5py; f=h5py.File('$D/nan.h5'); print('    training/nonfinite', f['training/nonfinite'][()].tolist(), 'loss r0', [round(x,3) for x in f['training/loss'][0]])"
"${MPI[@]}" -np 2 "$B" --warmup-steps 1 --steps 100000 --progress-every 1000 --out $D/term.h5 > $D/term.log 2>&1 & pid=$!
sleep 20; t=$(now); kill -TERM $pid; wait $pid; rc=$?
report "SIGTERM to mpirun mid-run" $rc $t $D/term.h5 $D/term.log
"${MPI[@]}" -np 2 "$B" --warmup-steps 1 --steps 100000 --progress-every 1000 --out $D/kill.h5 > $D/kill.log 2>&1 & pid=$!
sleep 20; victim=$(pgrep -f "$VITDDP.*kill.h5" | tail -1); t=$(now); kill -KILL $victim; wait $pid; rc=$?
report "SIGKILL of one rank mid-run" $rc $t $D/kill.h5 $D/kill.log
"${MPI[@]}" -np 2 "$B" --warmup-steps 1 --steps 100000 --progress-every 1000 --step-timeout 10 --out $D/hang.h5 > $D/hang.log 2>&1 & pid=$!
sleep 20; victim=$(pgrep -f "$VITDDP.*hang.h5" | tail -1); t=$(now); kill -STOP $victim; wait $pid; rc=$?
report "one rank stopped (SIGSTOP: a hang), --step-timeout 10" $rc $t $D/hang.h5 $D/hang.log
kill -KILL $victim 2>/dev/null
echo
echo "== --no-overlap after its fix, NVLink, 25 MB buckets"
"${MPI[@]}" -np 2 "$B" --warmup-steps 5 --steps 10 --bucket-cap-mb 25 --no-overlap --out $D/nvlink-b25-nooverlap.h5 > $D/nooverlap.log 2>&1
grep -E "steps/s|transport" $D/nooverlap.log
  } > "$OUT/signals.log" 2>&1
  cat "$OUT/signals.log"
  packdir "$OUT/signals"
  D=$OUT/faults; mkdir -p "$D"
  {
echo "== 1. a batch that does not fit: vit_h_14, batch 4096 (fp32), 2 ranks"
t=$(now); timeout 120 "${MPI[@]}" -np 2 "$B" --model vit_h_14 --batch-size 4096 --steps 2 --out $D/oom.h5 > $D/oom.log 2>&1; rc=$?
echo "exit $rc after $(since $t) s; file: $([ -e $D/oom.h5 ] && steps_of $D/oom.h5 || echo 'none (removed)')"
grep -E "error" $D/oom.log | head -2
echo "-- the same with bf16 and batch 1024"
timeout 120 "${MPI[@]}" -np 2 "$B" --model vit_h_14 --batch-size 1024 --precision bf16 --steps 2 --out $D/oom16.h5 > $D/oom16.log 2>&1; echo "exit $?"
grep -E "error" $D/oom16.log | head -1

echo
echo "== 2. estimate (--dry-run) against a real run: vit_l_32, batch 32, fp32, 2 ranks"
$B --dry-run --model vit_l_32 --batch-size 32
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits -l 1 > $D/smi.csv 2>&1 & smi=$!
timeout 120 "${MPI[@]}" -np 2 "$B" --model vit_l_32 --batch-size 32 --warmup-steps 5 --steps 10 --out $D/l32.h5 > $D/l32.log 2>&1; echo "run: exit $?"
kill $smi 2>/dev/null; wait $smi 2>/dev/null
grep -E "device memory of rank 0|warning: the memory estimate" $D/l32.log
echo "nvidia-smi, peak used_memory per process (MiB, CUDA context and NCCL included):"
awk -F', ' '$2+0 > m[$1] {m[$1] = $2+0} END {for (p in m) print "  pid " p ": " m[p] " MiB"}' $D/smi.csv
echo "-- bf16, momentum, --grad-as-bucket-view off, fp16 compression (reducer buffers)"
$B --dry-run --model vit_l_32 --batch-size 32 --precision bf16 --momentum 0.9 --grad-as-bucket-view off --compression fp16 | grep -E "optimizer state|activations|reducer|persistent"
timeout 120 "${MPI[@]}" -np 2 "$B" --model vit_l_32 --batch-size 32 --precision bf16 --momentum 0.9 --grad-as-bucket-view off \
  --compression fp16 --warmup-steps 2 --steps 3 --out $D/l32b.h5 > $D/l32b.log 2>&1; echo "run: exit $?"
grep -E "device memory of rank 0|warning: the memory estimate" $D/l32b.log

echo
echo "== 3. a rank that errors inside step 5 (vit_b_32, batch 32, --step-timeout 10)"
echo "| case | exit | s from the fault to the end | s in all | file | first error lines |"
echo "| --- | --- | --- | --- | --- | --- |"
fault() {  # fault NAME RANK MODE [MPIRUN-OPTIONS...]
  local name=$1 rank=$2 mode=$3; shift 3
  local log=$D/$name.log t0 tf rc
  t0=$(now)
  timeout 90 "${MPI[@]}" "$@" -np 2 "$B" --model vit_b_32 --batch-size 32 --warmup-steps 1 --steps 200 --progress-every 50 \
    --step-timeout 10 --debug-fail-at-step 5 --debug-fail-rank $rank --debug-fail-mode $mode --out $D/$name.h5 > $log 2>&1 &
  local pid=$!
  tf=""
  while kill -0 $pid 2>/dev/null; do
    if [ -z "$tf" ] && grep -q "debug fault injection" $log; then tf=$(now); fi
    sleep 0.1
  done
  wait $pid; rc=$?
  [ -z "$tf" ] && tf=$t0
  echo "| $name (rank $rank, $mode${*:+, $*}) | $rc | $(since $tf) | $(since $t0) | $([ -e $D/$name.h5 ] && steps_of $D/$name.h5 || echo none) | $(grep -hoE '\[vitddp rank [0-9]\] error: .{0,160}' $log | head -3 | tr '\n' ' ') |"
}
fault throw1 1 throw
fault exit1 1 exit
fault throw0 0 throw
fault ncclabort1 1 nccl-abort
fault ncclabort1-net 1 nccl-abort -x NCCL_P2P_DISABLE=1 -x NCCL_SHM_DISABLE=1  # NCCL over sockets
echo "(expected: every case ends in well under 10 s except nccl-abort over NVLink, which the peer's watchdog"
echo " ends at --step-timeout unless NCCL reports an asynchronous error first; the file holds 5 steps)"

echo
echo "== 4. GPU tests of the estimate (gpu_tests \"[memory]\", when GPU_TESTS is built)"
[ -x "$GPU_TESTS" ] && timeout 120 "$GPU_TESTS" "[memory]" 2>&1 | tail -3 || echo "GPU_TESTS=$GPU_TESTS not built"
  } > "$OUT/faults.log" 2>&1
  cat "$OUT/faults.log"
  packdir "$OUT/faults"
}
source "$(dirname "$0")/lib.sh"
main "$@"
