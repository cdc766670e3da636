#!/usr/bin/env bash
# Session 4, the non-finite check folded into the copy-engine all-reduce (2 x H200): kernel and
# 2-rank tests; a 2-GPU copy-engine run with a NaN batch on rank 0 at step 13 (--on-nonfinite skip:
# the step must be flagged on both ranks and not applied, the run goes on); then 1-GPU and 2-GPU
# (NCCL, copy-engine) bf16 and tf32 figures in one job. Output tarred into $OUT.
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
W=/tmp/s4h; rm -rf $W; mkdir -p $W/sweep
timeout 60 carry/gpu_tests "[ce_reduce]" > $W/ce_reduce.log 2>&1; echo "ce_reduce exit $?" >> $W/ce_reduce.log
timeout 120 mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -np 2 carry/gpu_mpi_tests > $W/gpu_mpi.log 2>&1; echo "gpu_mpi_tests exit $?" >> $W/gpu_mpi.log
tail -n 3 $W/ce_reduce.log $W/gpu_mpi.log
timeout 60 mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -np 2 carry/vitddp --allreduce copy-engine --precision bf16 --data device \
  --warmup-steps 5 --steps 15 --cooldown-steps 0 --progress-every 5 --debug-nan-at-step 12 --on-nonfinite skip \
  --out $W/nan.h5 > $W/nan.log 2>&1; echo "nan run exit $?" >> $W/nan.log
grep -E "non-finite|exit|timed window" $W/nan.log
python3 -c "
import h5py, numpy as np
f = h5py.File('$W/nan.h5', 'r')
print('training/nonfinite per rank:', f['training/nonfinite'][:].tolist())
l = f['training/loss'][:]
print('loss rank 0:', np.round(l[0], 4).tolist())
print('summary nonfinite_steps', float(f['summary/nonfinite_steps'][()]))
"
SPECS="bf16:none:1:0:0 bf16:none:2:0:0 bf16:none:2:0:0:--allreduce,copy-engine tf32:none:1:0:0 tf32:none:2:0:0:--allreduce,copy-engine" \
  OUT=$W/sweep timeout 150 bash results/commands/sweep_sm_carveout.sh > $W/sweep/stdout.txt 2>&1
grep -E "^\||rror" $W/sweep/stdout.txt
tar czf $OUT/s4h.tgz -C /tmp s4h
