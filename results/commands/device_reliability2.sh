#!/usr/bin/env bash
# Issue 7, second part, on the 2 x H200 machine (about 3 minutes):
#  1. out of GPU memory: the message with the whole need (vit_h_14, a batch that does not fit);
#  2. the --dry-run estimate of vit_l_32, batch 32, against what a real run allocated
#     (EngineInfo.device_bytes, cudaMemGetInfo) and nvidia-smi's peak per process;
#  3. a rank that errors inside a step (--debug-fail-mode throw | exit | nccl-abort) while its peer
#     is inside the step's NCCL all-reduce: exit code, seconds from the fault to the end of the
#     job, steps in the results file, the first error lines.
# Run from the repository root as `bash results/commands/device_reliability2.sh` with the binary in
# carry/vitddp (and optionally build/tests/gpu_tests as carry/gpu_tests) and $OUT set. Writes $OUT/reliability2.log and $OUT/reliability2.tar (files, logs).
set -u
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
D=/tmp/rel2; rm -rf $D; mkdir -p $D
MPI="mpirun --bind-to none -x NCCL_NVLS_ENABLE=0"
B=carry/vitddp
now() { date +%s.%N; }
since() { python3 -c "import sys,time; print(f'{time.time()-float(sys.argv[1]):.1f}')" "$1"; }
steps_of() { python3 -c "import h5py,sys; f=h5py.File(sys.argv[1],'r'); print(f['timing/forward'].shape[1], 'steps, stop_reason', f.attrs.get('stop_reason','-'))" "$1" 2>&1 | tail -1; }
{
echo "== 1. a batch that does not fit: vit_h_14, batch 4096 (fp32), 2 ranks"
t=$(now); timeout 120 $MPI -np 2 $B --model vit_h_14 --batch-size 4096 --steps 2 --out $D/oom.h5 > $D/oom.log 2>&1; rc=$?
echo "exit $rc after $(since $t) s; file: $([ -e $D/oom.h5 ] && steps_of $D/oom.h5 || echo 'none (removed)')"
grep -E "error" $D/oom.log | head -2
echo "-- the same with bf16 and batch 1024"
timeout 120 $MPI -np 2 $B --model vit_h_14 --batch-size 1024 --precision bf16 --steps 2 --out $D/oom16.h5 > $D/oom16.log 2>&1; echo "exit $?"
grep -E "error" $D/oom16.log | head -1

echo
echo "== 2. estimate (--dry-run) against a real run: vit_l_32, batch 32, fp32, 2 ranks"
$B --dry-run --model vit_l_32 --batch-size 32
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits -l 1 > $D/smi.csv 2>&1 & smi=$!
timeout 120 $MPI -np 2 $B --model vit_l_32 --batch-size 32 --warmup-steps 5 --steps 10 --out $D/l32.h5 > $D/l32.log 2>&1; echo "run: exit $?"
kill $smi 2>/dev/null; wait $smi 2>/dev/null
grep -E "device memory of rank 0|warning: the memory estimate" $D/l32.log
echo "nvidia-smi, peak used_memory per process (MiB, CUDA context and NCCL included):"
awk -F', ' '$2+0 > m[$1] {m[$1] = $2+0} END {for (p in m) print "  pid " p ": " m[p] " MiB"}' $D/smi.csv
echo "-- bf16, momentum, --grad-as-bucket-view off, fp16 compression (reducer buffers)"
$B --dry-run --model vit_l_32 --batch-size 32 --precision bf16 --momentum 0.9 --grad-as-bucket-view off --compression fp16 | grep -E "optimizer state|activations|reducer|persistent"
timeout 120 $MPI -np 2 $B --model vit_l_32 --batch-size 32 --precision bf16 --momentum 0.9 --grad-as-bucket-view off \
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
  timeout 90 $MPI "$@" -np 2 $B --model vit_b_32 --batch-size 32 --warmup-steps 1 --steps 200 --progress-every 50 \
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
echo "== 4. GPU tests of the estimate (carry/gpu_tests \"[memory]\", when present)"
[ -x carry/gpu_tests ] && timeout 120 carry/gpu_tests "[memory]" 2>&1 | tail -3 || echo "carry/gpu_tests not present"
} > $OUT/reliability2.log 2>&1
tar -C /tmp -cf $OUT/reliability2.tar rel2
cat $OUT/reliability2.log
