#!/usr/bin/env bash
# Issue "[4 of 8] Speed", 2 x H200 NVLink: how many SMs NCCL may take while it overlaps backward.
# vitddp on 2 GPUs per precision and --nccl-max-ctas (0 = NCCL's choice), 25 MiB buckets, CUDA
# graph, compression none (and bf16 for bf16), 10 warm-up + 20 timed steps; then a table of
# steps/s per GPU and median backward / exposed comm / comm-stream busy time from each file.
# Run from the repository root with carry/vitddp and $OUT set. About 3 minutes.
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
VITDDP=${VITDDP:-carry/vitddp}
MPI="mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -np 2"
COMMON="--data device --warmup-steps 10 --steps 20 --cooldown-steps 0 --progress-every 100 --overwrite"
{
  for p in ${PRECISIONS:-bf16 tf32 fp32}; do
    for c in none bf16; do
      [ "$p" != bf16 ] && [ "$c" = bf16 ] && continue
      for k in ${CTAS:-0 2 4 8 16}; do
        $MPI "$VITDDP" --precision $p --compression $c --nccl-max-ctas $k $COMMON --out "$OUT/ctas-$p-$c-$k.h5" | grep "timed window"
      done
    done
  done
  python3 - "$OUT" <<'PY'
import glob, os, sys
import h5py, numpy as np
print("| precision | compression | --nccl-max-ctas | steps/s per GPU | backward ms | exposed comm ms | comm busy ms |")
print("| --- | --- | --- | --- | --- | --- | --- |")
def key(p):
    b = os.path.basename(p)[:-3].split("-")
    return (b[1], b[2], int(b[3]))
for path in sorted(glob.glob(os.path.join(sys.argv[1], "ctas-*.h5")), key=key):
    p, c, k = key(path)
    with h5py.File(path, "r") as f:
        t = f["steps/timed"][0] == 1
        med = lambda n: 1e3 * float(np.median(f[n][0][t]))
        busy = 1e3 * float(np.median(f["buckets/allreduce_time"][0][t].sum(axis=1) + f["buckets/compress_time"][0][t].sum(axis=1)))
        print(f"| {p} | {c} | {k} | {float(f['summary/steps_per_second'][()]):.2f} | {med('timing/backward'):.2f} | "
              f"{med('timing/exposed_comm'):.2f} | {busy:.2f} |")
PY
} 2>&1 | tee "$OUT/sweep_nccl_ctas.log"
