#!/usr/bin/env bash
# Session 4, after the review fixes (2 x H200): gpu_mpi_tests (the copy-engine tests now also with
# one-tensor buckets, empty chunks and an eager step before the graph replays), then vitddp on
# 1 and 2 GPUs (NCCL, copy-engine, and copy-engine with checkpoints every 7 steps) to check that
# every step's row reaches the results file now that rank 0 writes it during the next step.
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
W=/tmp/s4g; rm -rf $W; mkdir -p $W
timeout 120 mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -np 2 carry/gpu_mpi_tests > $W/gpu_mpi.log 2>&1; echo "gpu_mpi_tests exit $?" >> $W/gpu_mpi.log
tail -n 3 $W/gpu_mpi.log
C="--precision bf16 --data device --warmup-steps 10 --steps 20 --cooldown-steps 1 --progress-every 10"
timeout 60 mpirun --bind-to none -np 1 carry/vitddp --no-ddp $C --out $W/np1.h5 > $W/np1.log 2>&1; echo "np1 exit $?" >> $W/np1.log
timeout 60 mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -np 2 carry/vitddp $C --out $W/nccl.h5 > $W/nccl.log 2>&1; echo "nccl exit $?" >> $W/nccl.log
timeout 60 mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -np 2 carry/vitddp $C --allreduce copy-engine --out $W/ce.h5 > $W/ce.log 2>&1; echo "ce exit $?" >> $W/ce.log
timeout 90 mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -np 2 carry/vitddp $C --allreduce copy-engine --checkpoint-every 7 \
  --checkpoint-path $W/ckpt.h5 --out $W/ce-ckpt.h5 > $W/ce-ckpt.log 2>&1; echo "ce-ckpt exit $?" >> $W/ce-ckpt.log
grep -hE "timed window|exit|checkpoint after|NCCL transport" $W/*.log
python3 - "$W" <<'PY'
import sys, h5py, numpy as np
for n in ("np1", "nccl", "ce", "ce-ckpt"):
    with h5py.File(f"{sys.argv[1]}/{n}.h5", "r") as f:
        loss = f["training/loss"][:]
        print(n, "rows", f["steps/timed"].shape, "loss", loss.shape, "all finite", bool(np.isfinite(loss).all()),
              "first/last", float(loss[0, 0]), float(loss[0, -1]), "steps_per_second", float(f["summary/steps_per_second"][()]),
              "transport", f.attrs.get("nccl_transport"))
PY
rm -f $W/ckpt*.h5
tar czf $OUT/s4g.tgz -C /tmp s4g
