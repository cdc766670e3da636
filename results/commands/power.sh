#!/usr/bin/env bash
# Session 9, job b: is the 2-GPU loss the all-reduce or the two GPUs sharing a power budget?
# Per round and precision (10 warm-up + 300 timed steps, ViT-L/32 batch 32, data on the GPU):
#   solo0 / solo1: one GPU alone (--no-ddp) on GPU 0 / GPU 1, the other idle;
#   both0 / both1: the same two runs at the same time (no communication between them);
#   ddp: 2 ranks, DDP, copy-engine all-reduce (--comm-streams auto).
# nvidia-smi samples both GPUs every 50 ms (clocks, power, temperatures, clock-event reasons).
# (wait $B, not a bare wait: that would also wait for the nvidia-smi sampler.)
# Into $OUT/$JOB.tgz: log.txt, <precision>-<run>-r<round>.h5, smi-<...>.csv.
set -u -o pipefail
: "${JOB:?set JOB}"
source results/commands/lib_ab.sh
COMMON="--data device --warmup-steps 10 --steps 300 --cooldown-steps 0 --progress-every 1000 --overwrite"
FIELDS=timestamp,index,clocks.sm,clocks.mem,power.draw,temperature.gpu,temperature.memory,clocks_event_reasons.active
smi_start() { nvidia-smi --query-gpu=$FIELDS --format=csv,nounits -lms 50 > "$W/smi-$1.csv" 2>&1 & SMI=$!; sleep 1; }
smi_stop() { sleep 1; kill $SMI; wait $SMI 2>/dev/null; }
solo() {  # solo NAME GPU PRECISION
  CUDA_VISIBLE_DEVICES=$2 timeout 120 mpirun --bind-to none -x CUDA_VISIBLE_DEVICES -x NCCL_NVLS_ENABLE=0 -np 1 carry/vitddp --no-ddp --precision $3 $COMMON --out "$W/$1.h5" 2>&1 |
    grep -E "timed window|rror" | sed "s/^/$1: /"
}
{
  carry/vitddp --version
  for r in 1 2; do
    for p in bf16 tf32; do
      [ $r = 2 ] && [ $p = tf32 ] && continue
      smi_start $p-solo0-r$r; solo $p-solo0-r$r 0 $p; smi_stop
      smi_start $p-solo1-r$r; solo $p-solo1-r$r 1 $p; smi_stop
      smi_start $p-both-r$r; solo $p-both0-r$r 0 $p & B=$!; solo $p-both1-r$r 1 $p; wait $B; smi_stop
      smi_start $p-ddp-r$r; ab $p-ddp-r$r 2 $p vitddp --allreduce copy-engine; smi_stop
    done
  done
} 2>&1 | tee "$W/log.txt"
ab_finish
