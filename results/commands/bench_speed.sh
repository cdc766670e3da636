#!/usr/bin/env bash
# Issue "[4 of 8] Speed": vitddp and PyTorch side by side on the GPU machine, in one job.
#   1 GPU, per precision (fp32, tf32, bf16), alternating: vitddp with CUDA graphs, vitddp with
#     --cuda-graph off, PyTorch (results/bench_torch_vit.py): ViT-L/32, batch 32, SGD, data on the
#     GPU, 10 warm-up + 20 timed steps; nvidia-smi samples the memory of each.
#   Per-kernel table of one bf16 step (and tf32) with Nsight Compute (results/kernel_table.py).
#   2 GPUs (when two are visible): vitddp per precision, compression none and bf16, all-reduce by
#     NCCL and by the copy engines (--allreduce copy-engine).
# Run from the repository root with the binaries in carry/ and $OUT set:
#     bash results/commands/bench_speed.sh
# Writes $OUT/bench_speed.log, $OUT/speed_table.md, $OUT/power_table.md, $OUT/kernels-<p>.md, the
# nvidia-smi samples (mem-*.txt, smi-*.csv) and the HDF5/JSON files
# (about 30 files). Through the device tool, point OUT at a folder of your own and tar it into the
# tool's $OUT: the tool returns only a few loose files (session 6 lost its HDF5 files that way).
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
VITDDP=${VITDDP:-carry/vitddp}
MPI="mpirun --bind-to none -x NCCL_NVLS_ENABLE=0"
NGPU=$(nvidia-smi -L | grep -c '^GPU')
PRECISIONS=${PRECISIONS:-fp32 tf32 bf16}
LOG=$OUT/bench_speed.log
status=0
run() { echo "== $*"; "$@"; local rc=$?; [ $rc -eq 0 ] || { echo "== FAILED (exit $rc): $*"; status=1; }; }
# samplers_start RUN [GPU] / samplers_stop: while RUN runs, GPU's (default 0) memory.used into
# mem-RUN.txt (speed_table.py's peak) and every GPU's clocks, power and clock-event reasons into
# smi-RUN.csv (power_table.py).
SMI_FIELDS=timestamp,index,utilization.gpu,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active
nvidia-smi --query-gpu=$SMI_FIELDS --format=csv >/dev/null 2>&1 || SMI_FIELDS=${SMI_FIELDS/event/throttle}
samplers_start() {
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i "${2:-0}" -lms 100 > "$OUT/mem-$1.txt" 2>/dev/null &
  MEM_PID=$!
  nvidia-smi --query-gpu=$SMI_FIELDS --format=csv,nounits -lms 50 > "$OUT/smi-$1.csv" 2>/dev/null &
  SMI_PID=$!
}
samplers_stop() { kill "$MEM_PID" "$SMI_PID" 2>/dev/null; wait "$MEM_PID" "$SMI_PID" 2>/dev/null; }
COMMON="--data device --warmup-steps 10 --steps 20 --cooldown-steps 0 --progress-every 10 --overwrite"
{
  date -u; nvidia-smi -L
  for p in $PRECISIONS; do
    for mode in graph eager; do
      g=on; [ $mode = eager ] && g=off
      samplers_start "vitddp-$p-$mode"
      run $MPI -np 1 "$VITDDP" --no-ddp --precision "$p" --cuda-graph $g $COMMON --out "$OUT/vitddp-$p-$mode.h5"
      samplers_stop
    done
    if [ "$NGPU" -ge 2 ]; then
      samplers_start "vitddp-$p-graph-gpu1" 1
      run env CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=1 $MPI -x CUDA_DEVICE_ORDER -x CUDA_VISIBLE_DEVICES -np 1 "$VITDDP" --no-ddp --precision "$p" $COMMON \
        --out "$OUT/vitddp-$p-graph-gpu1.h5"
      samplers_stop
    fi
    samplers_start "torch-$p"
    run python3 results/bench_torch_vit.py --precision "$p" --warmup-steps 10 --steps 20 --json "$OUT/torch-$p.json"
    samplers_stop
  done
  if [ "${SKIP_NCU:-0}" != 1 ] && command -v ncu >/dev/null; then
    for p in ${NCU_PRECISIONS:-bf16}; do
      ncu --nvtx --nvtx-include "Batch 3/" --metrics gpu__time_duration.sum --csv \
          "$VITDDP" --no-ddp --precision "$p" --cuda-graph off --data device --warmup-steps 3 --steps 1 \
          --cooldown-steps 0 --progress-every 100 --overwrite --out /tmp/ncu-$p.h5 > "$OUT/ncu-$p.csv" 2>&1
      python3 results/kernel_table.py "$OUT/ncu-$p.csv" --floors "$p" > "$OUT/kernels-$p.md"
      cat "$OUT/kernels-$p.md"
    done
  fi
  if [ "$NGPU" -ge 2 ]; then
    for p in $PRECISIONS; do
      for c in none bf16; do
        samplers_start "vitddp-$p-np2-$c"
        run $MPI -np 2 "$VITDDP" --precision "$p" --compression $c $COMMON --out "$OUT/vitddp-$p-np2-$c.h5"
        samplers_stop; samplers_start "vitddp-$p-np2-$c-ce"
        run $MPI -np 2 "$VITDDP" --precision "$p" --compression $c --allreduce copy-engine $COMMON \
          --out "$OUT/vitddp-$p-np2-$c-ce.h5"
        samplers_stop
      done
    done
  fi
  python3 results/speed_table.py "$OUT" | tee "$OUT/speed_table.md"
  echo "Clocks and power while each run was busy (results/power_table.py):"
  python3 results/power_table.py "$OUT"/smi-*.csv | tee "$OUT/power_table.md"
  date -u
} > "$LOG" 2>&1
echo "exit $status"; grep -E '^\| |^## |Kernels of one step|Clocks and power|FAILED|timed window' "$LOG" | tail -c 12000
exit $status
