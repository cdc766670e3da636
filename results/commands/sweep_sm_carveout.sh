#!/usr/bin/env bash
# Issue "[4 of 8] Speed", 2 x H200 NVLink: backward's GEMMs planned for fewer SMs
# (--gemm-sm-carveout, cuBLASLt SM count target) next to NCCL's CTA cap (--nccl-max-ctas), against
# the 95% target. vitddp ViT-L/32 batch 32, data on the GPU, 10 warm-up + 20 timed steps; 1-GPU
# baselines first; then results/overlap_table.py per precision.
# Run from the repository root with carry/vitddp and $OUT set. About 4 minutes.
# SPECS (optional) overrides the list: "precision:compression:ranks:ctas:carveout[:extra] ..." where
# extra is more vitddp options with commas for spaces (e.g. --comm-priority,normal). Ranks 1 runs
# --no-ddp (the 1-GPU figure).
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
VITDDP=${VITDDP:-carry/vitddp}
COMMON="--data device --warmup-steps 10 --steps 20 --cooldown-steps 0 --progress-every 100 --overwrite"
SPECS=${SPECS:-"bf16:none:1:0:0 bf16:none:1:0:16
bf16:none:2:0:0 bf16:none:2:0:16 bf16:none:2:0:24 bf16:none:2:0:32 bf16:none:2:8:8 bf16:none:2:12:12
bf16:none:2:16:16 bf16:none:2:16:24 bf16:none:2:24:24 bf16:none:2:32:32
bf16:bf16:2:0:0 bf16:bf16:2:16:16 bf16:bf16:2:8:8
tf32:none:1:0:0 tf32:none:2:0:0 tf32:none:2:16:16 tf32:none:2:8:8"}
{
  for s in $SPECS; do
    IFS=: read -r p c n k v x <<< "$s"
    extra=${x//,/ }
    name="$p-$c-np$n-ctas$k-carve$v${x:+-${x//[-,]/}}"
    # 1 rank: --no-ddp, without the reducer's options (vitddp refuses options that have no effect).
    comm="--compression $c --nccl-max-ctas $k"; [ "$n" = 1 ] && comm="--no-ddp"
    timeout 90 mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -np "$n" "$VITDDP" $comm --precision "$p" \
      --gemm-sm-carveout "$v" $extra $COMMON \
      --out "$OUT/carve-$name.h5" 2>&1 | grep -E "timed window|rror" | sed "s/^/$name: /"
  done
  for p in bf16 tf32 fp32; do
    base="$OUT/carve-$p-none-np1-ctas0-carve0.h5"
    [ -f "$base" ] || continue
    echo; echo "## $p"
    python3 results/overlap_table.py --baseline "$base" $(ls "$OUT"/carve-$p-*.h5 | sort -V)
  done
} 2>&1 | tee "$OUT/sweep_sm_carveout.log"
