#!/usr/bin/env bash
# Session 9, job e: what in the copy-engine all-reduce slows backward on 2 GPUs (bf16, 2 comm
# streams; tf32, 1 stream), by removing one part at a time (experiment build vitddp_exp = this
# commit + VITDDP_EXP_CE_SKIP, not in the tree: "sum" skips the sum kernels, "copy" the data copies
# (flags still raised, so the protocol and its waits stay), "both" both; the gradients are then
# wrong, only the timings count), 300 timed steps, nvidia-smi clocks and power; then the speed
# benchmark (bench_speed.sh) with vitddp. Into $OUT/$JOB.tgz: log.txt, *.h5, smi-*.csv, bench/.
set -u -o pipefail
: "${JOB:?set JOB}"
source results/commands/lib_ab.sh
COMMON="--data device --warmup-steps 10 --steps 300 --cooldown-steps 0 --progress-every 1000 --overwrite"
FIELDS=timestamp,index,utilization.gpu,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active
smi_start() { nvidia-smi --query-gpu=$FIELDS --format=csv,nounits -lms 50 > "$W/smi-$1.csv" 2>&1 & SMI=$!; sleep 0.5; }
smi_stop() { sleep 0.5; kill $SMI; wait $SMI 2>/dev/null; }
{
  carry/vitddp --version
  for p in bf16 tf32; do
    smi_start $p-1gpu; ab $p-1gpu 1 $p vitddp; smi_stop
    smi_start $p-full; ab $p-full 2 $p vitddp --allreduce copy-engine; smi_stop
    for k in sum copy both; do
      smi_start $p-skip-$k
      VITDDP_EXP_CE_SKIP=$k timeout 120 mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -x VITDDP_EXP_CE_SKIP -np 2 \
        carry/vitddp_exp --precision $p --allreduce copy-engine --on-nonfinite skip $COMMON --out "$W/$p-skip-$k.h5" 2>&1 |
        grep -E "timed window|rror" | sed "s/^/$p-skip-$k: /"
      smi_stop
    done
  done
  python3 results/power_table.py "$W"/smi-*.csv
} 2>&1 | tee "$W/log.txt"
ab_bench_speed
ab_finish
