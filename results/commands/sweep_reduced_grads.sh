#!/usr/bin/env bash
# Issue "[4 of 8] Speed", 2 x H200 NVLink: --reduced-grads in-place vs separate (out-of-place
# all-reduce into an ncclMemAlloc'd buffer that NCCL registers inside the CUDA graph) vs symmetric
# (gradients in a symmetric NCCL window), per precision and compression, with NCCL's CTA cap and
# the GEMM SM carveout. 1-GPU baselines (--no-ddp) first;
# table by results/overlap_table.py. Run from the repository root with carry/vitddp and $OUT set.
# Needs a build of commit ab6fb23: --reduced-grads was removed afterwards (505d594; no gain, see
# results/2026-11-30-issue5-overlap-2xH200/README.md).
# SPECS (optional): "precision:compression:reduced:ctas:carveout ..." (ranks 2; np1 = --no-ddp baseline)
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
VITDDP=${VITDDP:-carry/vitddp}
COMMON="--data device --warmup-steps 10 --steps 20 --cooldown-steps 0 --progress-every 100 --overwrite"
SPECS=${SPECS:-"bf16:none:in-place:0:0 bf16:none:separate:0:0 bf16:none:separate:16:16 bf16:none:separate:8:8
bf16:bf16:in-place:0:0 bf16:bf16:separate:0:0 tf32:none:in-place:0:0 tf32:none:separate:0:0 tf32:bf16:separate:0:0
fp32:none:separate:0:0"}
{
  for p in ${BASELINES:-bf16 tf32}; do
    timeout 90 mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -np 1 "$VITDDP" --no-ddp --precision $p $COMMON \
      --out "$OUT/rg-$p-noddp.h5" 2>&1 | grep -E "timed window|rror" | sed "s/^/$p-noddp: /"
  done
  timeout 60 mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -x NCCL_DEBUG=INFO -x NCCL_DEBUG_SUBSYS=ALL -np 2 "$VITDDP" \
    --precision bf16 --reduced-grads ${DEBUG_MODE:-separate} --data device --warmup-steps 2 --steps 2 --cooldown-steps 0 \
    --out /tmp/rg-debug.h5 --overwrite > "$OUT/nccl_reg_debug.log" 2>&1
  grep -ciE "regist" "$OUT/nccl_reg_debug.log" | sed 's/^/NCCL registration lines: /'
  grep -iE "regist|symm|window|sym" "$OUT/nccl_reg_debug.log" | grep -v "^$" | head -${DEBUG_LINES:-4}
  for s in $SPECS; do
    IFS=: read -r p c r k v <<< "$s"
    name="$p-$c-$r-ctas$k-carve$v"
    timeout 90 mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -np 2 "$VITDDP" --precision "$p" --compression "$c" \
      --reduced-grads "$r" --nccl-max-ctas "$k" --gemm-sm-carveout "$v" $COMMON \
      --out "$OUT/rg-$name.h5" 2>&1 | grep -E "timed window|rror" | sed "s/^/$name: /"
  done
  for p in bf16 tf32 fp32; do
    [ -f "$OUT/rg-$p-noddp.h5" ] || continue
    echo; echo "## $p"
    python3 results/overlap_table.py --baseline "$OUT/rg-$p-noddp.h5" $(ls "$OUT"/rg-$p-*.h5 | sort -V)
  done
} 2>&1 | tee "$OUT/sweep_reduced_grads.log"
