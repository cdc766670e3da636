#!/usr/bin/env bash
# Speed against PyTorch, per precision, in one job on one machine:
#   1 GPU, per precision (fp32, tf32, bf16), alternating: vitddp with its CUDA graph, vitddp with
#     --cuda-graph off, and PyTorch (results/bench_torch_vit.py: torchvision vit_l_32, batch 32,
#     SGD, data on the GPU); ViT-L/32, batch 32, 10 warm-up + 20 timed steps; nvidia-smi samples
#     the memory, clocks and power of each run.
#   With 2 GPUs or more: the 1-GPU runs again on GPU 1 alone (GPUs of one host differ by up to 2%
#     under the power limit; DDP runs at the pace of the slower one), then 2 GPUs per precision,
#     compression none and bf16, all-reduce by NCCL and by the copy engines (--allreduce copy-engine).
#   With ncu installed (SKIP_NCU=1 leaves it out): the kernels of one bf16 step (NCU_PRECISIONS).
# Usage: bash results/commands/speed.sh OUT   |   bash results/commands/speed.sh --readme DIR
# Writes into OUT: log.txt, speed_table.md (results/speed_table.py), power_table.md
# (results/power_table.py), kernels-<p>.md (results/kernel_table.py), mem-*.txt, smi-*.csv,
# torch-<p>.json and the HDF5 files (packed into h5.tar.xz at the end), README.md. About 6 minutes
# on 2 x H200. Needs torch and torchvision for the PyTorch rows.
TOPIC=speed
TITLE="Speed against PyTorch, per precision: ViT-L/32, batch 32 per GPU"
NEED_GPUS=1
BASELINE='graph$'
WARMUP=10 STEPS=20
PRECISIONS=${PRECISIONS:-fp32 tf32 bf16}
about() {
  cat <<'MD'
vitddp and PyTorch side by side in one job on one machine, per precision (fp32, tf32, bf16):
ViT-L/32, batch 32, SGD, data made on the GPU, 10 warm-up + 20 timed steps.

- `vitddp-<p>-graph` / `-eager`: vitddp on GPU 0 with its CUDA graph and with `--cuda-graph off`;
  `-graph-gpu1`: the same on GPU 1 alone.
- `torch-<p>.json`: PyTorch 2.11 eager (`results/bench_torch_vit.py`) in the same job, right after.
- `vitddp-<p>-np2-<compression>[-ce]`: 2 GPUs, NCCL or the copy engines (`-ce`).
- steps/s = timed steps / host wall time of the timed window; MFU against the measured 8192^3
  matmul ceiling of one H200 (bf16 781, tf32 361, fp32 51 TFLOP/s); peak memory = nvidia-smi's
  peak of the process. `docs/benchmarks.md` says how each number is measured.
MD
}
includes() {  # regenerate the speed and power tables from the folder's files
  local d=$1 t; t=$(mktemp -d)
  cp "$d"/*.json "$d"/mem-*.txt "$t"/ 2>/dev/null
  [ -f "$d/h5.tar.xz" ] && tar xJf "$d/h5.tar.xz" -C "$t"
  cp "$d"/*.h5 "$t"/ 2>/dev/null
  [ -f "$d/smi.tar.xz" ] && tar xJf "$d/smi.tar.xz" -C "$t"
  cp "$d"/smi-*.csv "$t"/ 2>/dev/null
  { echo "## Speed table (results/speed_table.py)"; echo; "$PY" "$REPO/results/speed_table.py" "$t"; } > "$d/speed_table.md"
  echo "$d/speed_table.md"
  if ls "$t"/smi-*.csv >/dev/null 2>&1; then
    { echo "## Clocks and power while each run was busy (results/power_table.py)"; echo
      # shellcheck disable=SC2046
      "$PY" "$REPO/results/power_table.py" $(find "$t" -name 'smi-*.csv' | sort); } > "$d/power_table.md"
    echo "$d/power_table.md"
  fi
  for k in "$d"/kernels-*.md; do [ -f "$k" ] && echo "$k"; done
  rm -rf "$t"
}
mem_start() {  # mem_start RUN [GPU]: GPU's memory.used every 100 ms into mem-RUN.txt, and smi samples
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i "${2:-0}" -lms 100 > "$OUT/mem-$1.txt" 2>/dev/null &
  MEM_PID=$!
  smi_start "$1"
}
mem_stop() { kill "$MEM_PID" 2>/dev/null; wait "$MEM_PID" 2>/dev/null; smi_stop; }
experiment() {
  local p mode g c
  for p in $PRECISIONS; do
    for mode in graph eager; do
      g=on; [ $mode = eager ] && g=off
      mem_start "vitddp-$p-$mode"; vrun "vitddp-$p-$mode" 1 "$p" --cuda-graph $g; mem_stop
    done
    if [ "$NGPU" -ge 2 ]; then
      mem_start "vitddp-$p-graph-gpu1" 1; solo "vitddp-$p-graph-gpu1" 1 "$p"; mem_stop
    fi
    mem_start "torch-$p"
    "$PY" "$REPO/results/bench_torch_vit.py" --precision "$p" --warmup-steps 10 --steps 20 --json "$OUT/torch-$p.json" ||
      echo "torch-$p: FAILED"
    mem_stop
  done
  if [ "${SKIP_NCU:-0}" != 1 ] && command -v ncu >/dev/null; then
    for p in ${NCU_PRECISIONS:-bf16}; do
      ncu --nvtx --nvtx-include "Batch 3/" --metrics gpu__time_duration.sum --csv \
          "$VITDDP" --no-ddp --precision "$p" --cuda-graph off --data device --warmup-steps 3 --steps 1 \
          --cooldown-steps 0 --progress-every 100 --overwrite --out "$OUT/ncu-$p.h5" > "$OUT/ncu-$p.csv" 2>&1
      rm -f "$OUT/ncu-$p.h5"
      "$PY" "$REPO/results/kernel_table.py" "$OUT/ncu-$p.csv" --floors "$p" > "$OUT/kernels-$p.md"
      gzip -f "$OUT/ncu-$p.csv"
    done
  fi
  if [ "$NGPU" -ge 2 ]; then
    for p in $PRECISIONS; do
      for c in none bf16; do
        mem_start "vitddp-$p-np2-$c"; vrun "vitddp-$p-np2-$c" 2 "$p" --compression $c; mem_stop
        mem_start "vitddp-$p-np2-$c-ce"; vrun "vitddp-$p-np2-$c-ce" 2 "$p" --compression $c --allreduce copy-engine; mem_stop
      done
    done
  fi
  "$PY" "$REPO/results/speed_table.py" "$OUT"
  pack
}
source "$(dirname "$0")/lib.sh"
main "$@"
