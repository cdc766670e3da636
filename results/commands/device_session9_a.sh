#!/usr/bin/env bash
# Session 9, job a: why some 2-GPU steps are slow. Every GPU test at HEAD (device_checks.sh, BENCH=0),
# then long runs (1 GPU and 2 GPUs, bf16 and tf32, copy-engine, 10 warm-up + 300 timed steps) while
# nvidia-smi samples each GPU every 50 ms: SM and memory clocks, power, temperatures and the active
# clock-event (throttle) reasons. Into $OUT/$JOB.tgz: log.txt, test logs, *.h5, smi-*.csv.
set -u -o pipefail
: "${JOB:?set JOB}"
source results/commands/lib_ab.sh
COMMON="--data device --warmup-steps 10 --steps 300 --cooldown-steps 0 --progress-every 1000 --overwrite"
FIELDS=timestamp,index,clocks.sm,clocks.mem,power.draw,enforced.power.limit,temperature.gpu,temperature.memory
REASONS=clocks_event_reasons.active
nvidia-smi --query-gpu=$REASONS --format=csv >/dev/null 2>&1 || REASONS=clocks_throttle_reasons.active
smi_start() { nvidia-smi --query-gpu=$FIELDS,$REASONS --format=csv,nounits -lms 50 > "$W/smi-$1.csv" 2>&1 & SMI=$!; sleep 1; }
smi_stop() { sleep 1; kill $SMI; wait $SMI 2>/dev/null; }
{
  carry/vitddp --version
  nvidia-smi -q -d PERFORMANCE,POWER,TEMPERATURE,CLOCK | grep -v '^$' | head -120
  for p in bf16 tf32; do
    smi_start 1gpu-$p; ab 1gpu-$p 1 $p vitddp; smi_stop
    smi_start 2gpu-$p; ab 2gpu-$p 2 $p vitddp --allreduce copy-engine; smi_stop
  done
  nvidia-smi -q -d PERFORMANCE | grep -v '^$'
  ab_tests
} 2>&1 | tee "$W/log.txt"
ab_finish
