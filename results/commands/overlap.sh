#!/usr/bin/env bash
# Issue "[4 of 8] Speed", 2 x H200 NVLink: bucket size and NCCL CTAs against the 95% scaling target,
# per precision, with the final build (CUDA graph, cuDNN attention in bf16, vectorised 16-bit casts).
# vitddp on 2 GPUs, data on the GPU, 10 warm-up + 20 timed steps; then a table from the files.
# Run from the repository root with carry/vitddp and $OUT set. About 2 minutes.
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
VITDDP=${VITDDP:-carry/vitddp}
MPI="mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -np 2"
COMMON="--data device --warmup-steps 10 --steps 20 --cooldown-steps 0 --progress-every 100 --overwrite"
run() {  # run NAME ARGS...
  local name=$1; shift
  timeout 60 $MPI "$VITDDP" "$@" $COMMON --out "$OUT/sweep-$name.h5" 2>&1 | grep "timed window" | sed "s/^/$name: /"
}
{
  run bf16-b25-none --precision bf16 --bucket-cap-mb 25
  run bf16-b100-none --precision bf16 --bucket-cap-mb 100
  run bf16-b25-bf16 --precision bf16 --bucket-cap-mb 25 --compression bf16
  run bf16-b100-bf16 --precision bf16 --bucket-cap-mb 100 --compression bf16
  run tf32-b100-none --precision tf32 --bucket-cap-mb 100
  run tf32-b100-bf16 --precision tf32 --bucket-cap-mb 100 --compression bf16
  run fp32-b100-none --precision fp32 --bucket-cap-mb 100
  run fp32-b25-ctas4 --precision fp32 --nccl-max-ctas 4
  python3 - "$OUT" <<'PY'
import glob, os, sys
import h5py, numpy as np
print("| run | steps/s per GPU | backward ms | exposed comm ms | comm-stream busy ms (all-reduce + casts) |")
print("| --- | --- | --- | --- | --- |")
for path in sorted(glob.glob(os.path.join(sys.argv[1], "sweep-*.h5"))):
    with h5py.File(path, "r") as f:
        t = f["steps/timed"][0] == 1
        med = lambda n: 1e3 * float(np.median(f[n][0][t]))
        busy = 1e3 * float(np.median(f["buckets/allreduce_time"][0][t].sum(axis=1) + f["buckets/compress_time"][0][t].sum(axis=1)))
        print(f"| {os.path.basename(path)[6:-3]} | {float(f['summary/steps_per_second'][()]):.2f} | {med('timing/backward'):.2f} | "
              f"{med('timing/exposed_comm'):.2f} | {busy:.2f} |")
PY
} 2>&1 | tee "$OUT/sweep_buckets_2gpu.log"
