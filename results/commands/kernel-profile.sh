#!/usr/bin/env bash
# Where a training step's GPU time goes, per kernel family, against floors (one GPU).
#   For each model of MODELS: Nsight Compute over exactly one timed step of vitddp (--no-ddp,
#   batch BATCH, PRECISION, data on the GPU, CUDA graph off so that each kernel is its own launch;
#   vitddp brackets its timed steps with cudaProfilerStart/Stop, so --profile-from-start off keeps
#   that step), at the application clocks (--clock-control none); the GEMM ceilings at the model's
#   shapes (results/peers/torch_peers.py --gemm-ceilings, needs torch); then
#   results/kernel_table.py (vitddp-report kernels) writes one table per model into OUT/kernel_tables.md
#   (per kernel family, then the 10 kernels with the most time),
#   memory-bound kernels against the GPU's device-to-device copy bandwidth measured in the same job
#   (torch, a 1 GiB copy, read + write bytes; OUT/hbm_gbps.txt; 4300 GB/s, an H200's, when absent).
#   Each process autotunes its GEMMs before the profiled step, so the script also runs the same step
#   once without ncu and compares, from cuBLASLt's trace (CUBLASLT_LOG_LEVEL=2) of both runs, the
#   algorithm each GEMM ended with (results/tools/cublaslt_choices.py): the README says how many of
#   the profiled GEMMs are a plain run's.
# Usage: bash results/commands/kernel-profile.sh OUT  |  bash results/commands/kernel-profile.sh --readme DIR
#   VITDDP [build/vitddp]  PYTHON [python3]  MODELS [vit_b_16 vit_l_32 vit_l_16]  BATCH [32]
#   PRECISION [bf16]  NCU [ncu]. About a minute a model on an H200 (the ncu run, and the plain one).
# Writes OUT/ncu-<model>-<precision>-b<batch>.csv.xz (ncu's CSV), gemm-<model>-b<batch>.json,
# cublaslt-<model>-<precision>-b<batch>-{plain,ncu}.log.xz and gemm-choices-<model>-<precision>-b<batch>.txt
# (the comparison), kernel_tables.md, log.txt, README.md. Exit 2 on bad settings, 1 when a profile or a table failed.
set -u -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
VITDDP=${VITDDP:-build/vitddp}
PY=${PYTHON:-python3}
MODELS=${MODELS:-vit_b_16 vit_l_32 vit_l_16}
BATCH=${BATCH:-32}
PRECISION=${PRECISION:-bf16}
NCU=${NCU:-ncu}
die() { echo "kernel-profile.sh: $*" >&2; exit 2; }
export NCCL_NVLS_ENABLE=0
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi

measured_hbm() {  # measured_hbm DIR: the copy bandwidth in DIR/hbm_gbps.txt (GB/s > 0), nothing when absent or not one
  local v; v=$(cat "$1/hbm_gbps.txt" 2>/dev/null)
  if [[ $v =~ ^0*[1-9][0-9]*(\.[0-9]+)?$ ]]; then echo "$v"; fi
}
hbm_gbps() {  # hbm_gbps DIR: measured_hbm, else an H200's 4300 GB/s
  local v; v=$(measured_hbm "$1")
  echo "${v:-4300}"
}

measure_hbm() {  # measure_hbm FILE: device-to-device copy bandwidth in GB/s (read + write bytes) into FILE
  "$PY" - "$1" <<'PY'
import sys
import torch
n = 1 << 30
a = torch.empty(n, dtype=torch.uint8, device="cuda")
b = torch.empty_like(a)
for _ in range(3):
    b.copy_(a)
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record()
for _ in range(20):
    b.copy_(a)
end.record()
end.synchronize()
gbps = 2 * n * 20 / (start.elapsed_time(end) * 1e-3) / 1e9
open(sys.argv[1], "w").write("%.0f\n" % gbps)
print("device-to-device copy: %.0f GB/s (read + write)" % gbps)
PY
}

ncu_runs() {  # ncu_runs DIR: per Nsight Compute CSV of DIR (ncu-<model>-<precision>-b<batch>.csv[.xz]),
  # one line "FILE<tab>MODEL<tab>PRECISION<tab>BATCH"
  local f stem
  for f in "$1"/ncu-*.csv "$1"/ncu-*.csv.xz; do
    [ -e "$f" ] || continue
    stem=$(basename "$f" | sed -E 's/\.csv(\.xz)?$//')
    printf '%s\t%s\t%s\t%s\n' "$f" "$(sed -E 's/^ncu-(.*)-(bf16|tf32|fp32)-b[0-9]+$/\1/' <<<"$stem")" \
      "$(sed -E 's/.*-(bf16|tf32|fp32)-b[0-9]+$/\1/' <<<"$stem")" "$(sed -E 's/.*-b([0-9]+)$/\1/' <<<"$stem")"
  done
}

tables() {  # tables DIR: DIR/kernel_tables.md from DIR's ncu and GEMM files
  local dir=$1 f m p b g rc=0
  : > "$dir/kernel_tables.md"
  while IFS=$'\t' read -r f m p b; do
    g=(); [ -e "$dir/gemm-$m-b$b.json" ] && g=(--gemm "$dir/gemm-$m-b$b.json")
    "$PY" "$ROOT/results/kernel_table.py" "$f" "${g[@]}" --hbm-gbps "$(hbm_gbps "$dir")" \
      --model "$m" --precision "$p" --batch-size "$b" \
      --title "$m, batch $b, $p: one training step" --top 10 >> "$dir/kernel_tables.md" </dev/null || rc=1
  done < <(ncu_runs "$dir")
  return $rc
}

readme() {  # readme DIR
  local dir=$1
  tables "$dir" || return 1
  {
    echo "# Where a training step's GPU time goes, per kernel family (one GPU)"
    echo
    local runs models precision batch
    runs=$(ncu_runs "$dir")
    models=$(cut -f2 <<<"$runs" | sort -u | xargs)
    precision=$(cut -f3 <<<"$runs" | sort -u | xargs)
    batch=$(cut -f4 <<<"$runs" | sort -u | xargs)
    echo "Written by \`MODELS=\"$models\" PRECISION=\"$precision\" BATCH=\"$batch\" bash results/commands/kernel-profile.sh OUT\`"
    echo "(rewrite: \`bash results/commands/kernel-profile.sh --readme DIR\`)."
    local gpu; gpu=$(sed -nE 's/^GPU 0: ([^(]*[^ (]) *\(.*/\1/p' "$dir/log.txt" 2>/dev/null | head -1)
    [ -n "$gpu" ] && echo "Device: $gpu (\`log.txt\`)."
    echo "Nsight Compute timed each kernel of one step of \`vitddp --no-ddp --data device --cuda-graph off\` at the"
    echo "application clocks; \`x floor\` is a family's time over its floor: GEMMs against the same GEMMs at their"
    echo "measured ceilings (torch.matmul at the model's shapes, \`gemm-*.json\`), attention against the larger of its"
    echo "matrix products at the forward GEMM ceiling and its DRAM bytes, everything else against its DRAM bytes at"
    if [ -n "$(measured_hbm "$dir")" ]; then
      echo "$(hbm_gbps "$dir") GB/s (a 1 GiB device-to-device copy measured in the same job, read + write bytes: \`hbm_gbps.txt\`)."
      echo "Kernel by kernel, as ncu runs them, the step is longer than"
    else
      echo "4300 GB/s (a large device-to-device copy). Kernel by kernel, as ncu runs them, the step is longer than"
    fi
    echo "in a CUDA-graph run (no overlap between launches); the shares are what to read."
    local f m p b tag line missing=()
    while IFS=$'\t' read -r f m p b; do  # per profile: how many GEMMs are a plain run's, or that none was compared
      tag=$m-$p-b$b
      line=$(tail -n 1 "$dir/gemm-choices-$tag.txt" 2>/dev/null)
      if [[ $line =~ ^([0-9]+)\ GEMMs:\ ([0-9]+)\  ]]; then
        echo "$tag: ${BASH_REMATCH[2]} of ${BASH_REMATCH[1]} GEMMs ended with"
        echo "the algorithm of a plain run of the same step (cuBLASLt's trace, \`gemm-choices-$tag.txt\`)."
      else
        missing+=("$tag")
      fi
    done < <(ncu_runs "$dir")
    if [ ${#missing[@]} -gt 0 ]; then
      echo "No plain run was compared with ${missing[*]}: each profiled process autotuned its GEMMs under ncu,"
      echo "which may pick other algorithms than a plain run does (docs/benchmarks.md, \"Where the time goes\"), so"
      echo "the GEMM rows may not be a plain run's."
    fi
    echo
    cat "$dir/kernel_tables.md"
  } > "$dir/README.md"
  echo "wrote $dir/README.md"
}

if [ "${1:-}" = --readme ]; then
  [ $# -eq 2 ] && [ -d "$2" ] || die "usage: kernel-profile.sh --readme DIR (an existing folder)"
  readme "$2"; exit $?
fi
[ $# -eq 1 ] || die "usage: kernel-profile.sh OUT  |  kernel-profile.sh --readme DIR"
OUT=$1
[ -x "$VITDDP" ] || die "VITDDP=$VITDDP: not an executable (build it: cmake --build build --target vitddp)"
command -v "$NCU" >/dev/null || die "NCU=$NCU: Nsight Compute not found"
[[ $BATCH =~ ^[1-9][0-9]*$ ]] || die "BATCH: '$BATCH' is not a positive integer"
case $PRECISION in bf16|tf32|fp32) ;; *) die "PRECISION: '$PRECISION' is not bf16, tf32 or fp32";; esac
mkdir -p "$OUT" || die "$OUT: cannot create the folder"
status=0
{
  date -u; nvidia-smi -L
  rm -f "$OUT/hbm_gbps.txt"
  measure_hbm "$OUT/hbm_gbps.txt" || echo "kernel-profile.sh: no copy bandwidth measured (torch failed): floors at 4300 GB/s"
  for m in $MODELS; do
    tag=$m-$PRECISION-b$BATCH
    csv=$OUT/ncu-$tag.csv
    run=("$VITDDP" --no-ddp --model "$m" --precision "$PRECISION" --batch-size "$BATCH" --data device
      --warmup-steps 3 --steps 1 --cooldown-steps 0 --cuda-graph off --overwrite --out "$OUT/ncu-$m.h5")
    rm -f "$OUT/cublaslt-$tag"-*.log "$OUT/cublaslt-$tag"-*.log.xz "$OUT/gemm-choices-$tag.txt"
    plain_ok=1 ncu_ok=1
    CUBLASLT_LOG_LEVEL=2 CUBLASLT_LOG_FILE=$OUT/cublaslt-$tag-plain.log timeout 300 "${run[@]}" > /dev/null ||
      { echo "kernel-profile.sh: the plain run of $m failed: no GEMM comparison"; plain_ok=0; }
    CUBLASLT_LOG_LEVEL=2 CUBLASLT_LOG_FILE=$OUT/cublaslt-$tag-ncu.log timeout 300 "$NCU" --profile-from-start off \
      --clock-control none --csv --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
      "${run[@]}" > "$csv" || { echo "kernel-profile.sh: ncu failed for $m"; status=1; ncu_ok=0; }
    rm -f "$OUT/ncu-$m.h5"
    xz -9f "$csv"
    # Only two complete runs compare: a partial trace's last call of a GEMM may be an autotuning candidate.
    if [ $plain_ok = 1 ] && [ $ncu_ok = 1 ]; then
      "$PY" "$ROOT/results/tools/cublaslt_choices.py" "$OUT/cublaslt-$tag-plain.log" "$OUT/cublaslt-$tag-ncu.log" \
        > "$OUT/gemm-choices-$tag.txt" || { echo "kernel-profile.sh: no GEMM comparison for $m"; rm -f "$OUT/gemm-choices-$tag.txt"; }
    fi
    logs=("$OUT/cublaslt-$tag"-*.log)
    [ -e "${logs[0]}" ] && xz -9f "${logs[@]}"
    "$PY" "$ROOT/results/peers/torch_peers.py" --gemm-ceilings --model "$m" --batch-size "$BATCH" \
      --gemm-precisions "$PRECISION" --json "$OUT/gemm-$m-b$BATCH.json" ||
      echo "kernel-profile.sh: no GEMM ceilings for $m (torch_peers.py failed): the GEMM floor stays empty"
  done
  date -u
} > >(tee "$OUT/log.txt") 2>&1
readme "$OUT" || status=1
exit $status
