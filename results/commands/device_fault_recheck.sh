#!/usr/bin/env bash
# Re-check of the "a rank throws mid-run" cases on 2 x H200 after the error path stopped unwinding
# (the trainer MPI_Aborts from inside its loop): vit_b_32, fault in step 5 (0-based), --step-timeout 10.
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
D=/tmp/fr; mkdir -p $D
for c in "throw1 1 throw" "throw0 0 throw" "exit1 1 exit"; do
  set -- $c
  t0=$(date +%s.%N)
  timeout 60 mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -np 2 carry/vitddp --model vit_b_32 --batch-size 32 --warmup-steps 1 \
    --steps 200 --progress-every 50 --step-timeout 10 --debug-fail-at-step 5 --debug-fail-rank $2 --debug-fail-mode $3 \
    --out $D/$1.h5 > $D/$1.log 2>&1
  rc=$?
  t=$(python3 -c "import time,sys; print('%.1f' % (time.time()-float(sys.argv[1])))" $t0)
  steps=$(python3 -c "import h5py,sys; f=h5py.File(sys.argv[1],'r'); print(f['timing/forward'].shape[1], 'steps, stop_reason', f.attrs.get('stop_reason','-'))" $D/$1.h5 2>&1 | tail -1)
  echo "| $1 (rank $2, $3) | exit $rc | ${t} s in all (start-up included) | $steps | $(grep -hoE '\[vitddp rank [0-9]\] error: .{0,120}' $D/$1.log | head -2 | tr '\n' ' ') |"
done
