#!/usr/bin/env bash
# Issue 7 on the 2 x H200 machine: the failure cases that need GPUs. For each: what triggered it,
# the exit code, how long the job took to end, and what the results file held.
# Run from the repository root with carry/vitddp, $OUT set. Writes $OUT/reliability.log and the
# HDF5 files (tar).
set -u
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
D=/tmp/rel; rm -rf $D; mkdir -p $D
MPI="mpirun --bind-to none -x NCCL_NVLS_ENABLE=0"
B=carry/vitddp
now() { date +%s.%N; }
steps_of() { python3 -c "import h5py,sys; f=h5py.File(sys.argv[1]); print(f['timing/forward'].shape[1], f.attrs.get('stop_reason','-'))" "$1" 2>&1 | tail -1; }
report() {  # report CASE RC T0 FILE LOG
  echo "| $1 | exit $2 | $(python3 -c "import sys,time; print(f\"{time.time()-float(sys.argv[1]):.1f}\")" $3) s | $( [ -e "$4" ] && steps_of "$4" || echo 'no file') | $(grep -hoE '(error|warning): .{0,150}' "$5" | head -1) |"
}
{
echo "| case | exit | time to end | file: steps, stop_reason | message |"
echo "| --- | --- | --- | --- | --- |"
t=$(now); $MPI -np 2 $B --batch-size 40000 --steps 2 --out $D/oom.h5 > $D/oom.log 2>&1; rc=$?
report "batch that does not fit (--batch-size 40000)" $rc $t $D/oom.h5 $D/oom.log
t=$(now); $MPI -np 3 --oversubscribe $B --steps 2 --out $D/np3.h5 > $D/np3.log 2>&1; rc=$?
report "3 ranks on a 2-GPU node" $rc $t $D/np3.h5 $D/np3.log
t=$(now); $MPI -np 2 bash -c 'CUDA_VISIBLE_DEVICES=$OMPI_COMM_WORLD_LOCAL_RANK exec carry/vitddp --warmup-steps 2 --steps 5 --out /tmp/rel/pertask.h5' > $D/pertask.log 2>&1; rc=$?
report "one GPU per task (CUDA_VISIBLE_DEVICES=local rank)" $rc $t $D/pertask.h5 $D/pertask.log
grep -E "NCCL transport|steps/s" $D/pertask.log | sed 's/^/    /'
t=$(now); $MPI -np 2 bash -c 'CUDA_VISIBLE_DEVICES=0 exec carry/vitddp --steps 2 --out /tmp/rel/same.h5' > $D/same.log 2>&1; rc=$?
report "both tasks given GPU 0" $rc $t $D/same.h5 $D/same.log
t=$(now); $MPI -np 2 $B --warmup-steps 1 --steps 6 --debug-nan-at-step 3 --on-nonfinite skip --out $D/nan.h5 > $D/nan.log 2>&1; rc=$?
report "NaN in rank 0's batch at step 4, --on-nonfinite skip" $rc $t $D/nan.h5 $D/nan.log
python3 -c "import h5py; f=h5py.File('$D/nan.h5'); print('    training/nonfinite', f['training/nonfinite'][()].tolist(), 'loss r0', [round(x,3) for x in f['training/loss'][0]])"
$MPI -np 2 $B --warmup-steps 1 --steps 100000 --progress-every 1000 --out $D/term.h5 > $D/term.log 2>&1 & pid=$!
sleep 20; t=$(now); kill -TERM $pid; wait $pid; rc=$?
report "SIGTERM to mpirun mid-run" $rc $t $D/term.h5 $D/term.log
$MPI -np 2 $B --warmup-steps 1 --steps 100000 --progress-every 1000 --out $D/kill.h5 > $D/kill.log 2>&1 & pid=$!
sleep 20; victim=$(pgrep -f "carry/vitddp.*kill.h5" | tail -1); t=$(now); kill -KILL $victim; wait $pid; rc=$?
report "SIGKILL of one rank mid-run" $rc $t $D/kill.h5 $D/kill.log
$MPI -np 2 $B --warmup-steps 1 --steps 100000 --progress-every 1000 --step-timeout 10 --out $D/hang.h5 > $D/hang.log 2>&1 & pid=$!
sleep 20; victim=$(pgrep -f "carry/vitddp.*hang.h5" | tail -1); t=$(now); kill -STOP $victim; wait $pid; rc=$?
report "one rank stopped (SIGSTOP: a hang), --step-timeout 10" $rc $t $D/hang.h5 $D/hang.log
kill -KILL $victim 2>/dev/null
echo
echo "== --no-overlap after its fix, NVLink, 25 MB buckets"
$MPI -np 2 $B --warmup-steps 5 --steps 10 --bucket-cap-mb 25 --no-overlap --out $D/nvlink-b25-nooverlap.h5 > $D/nooverlap.log 2>&1
grep -E "steps/s|transport" $D/nooverlap.log
} > $OUT/reliability.log 2>&1
tar -C /tmp -cf $OUT/reliability.tar rel
cat $OUT/reliability.log
