#!/usr/bin/env bash
# Session 3, last device call (2 x H200): the two step benchmarks after their inputs were shared
# (precision_bench, overlap_bench), then 2-GPU bf16 runs with NCCL forced to more channels / CTAs
# than its 24 (so the all-reduce could finish sooner and free its SMs), against the default.
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
W=/tmp/s3last; rm -rf $W; mkdir -p $W
timeout 120 carry/gpu_tests "[precision_bench]" > $W/precision_bench.log 2>&1; echo "exit $?" >> $W/precision_bench.log
timeout 120 carry/gpu_tests "[overlap_bench]" > $W/overlap_bench.log 2>&1; echo "exit $?" >> $W/overlap_bench.log
COMMON="--precision bf16 --data device --warmup-steps 10 --steps 20 --cooldown-steps 0 --progress-every 100 --overwrite"
run() {  # run NAME NP "ENV=V ..." ARGS...
  local name=$1 np=$2 envs=$3; shift 3
  local xs=""; for e in $envs; do xs="$xs -x $e"; done
  env $envs timeout 60 mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 $xs -np "$np" carry/vitddp "$@" $COMMON \
    --out "$W/ch-$name.h5" 2>&1 | grep -E "timed window|rror" | sed "s/^/$name: /"
}
{
  run noddp 1 "" --no-ddp
  run default 2 ""
  run minch32 2 "NCCL_MIN_NCHANNELS=32"
  run minctas32 2 "NCCL_MIN_CTAS=32 NCCL_MIN_NCHANNELS=32"
  run minctas48 2 "NCCL_MIN_CTAS=48 NCCL_MIN_NCHANNELS=48 NCCL_MAX_NCHANNELS=48"
  python3 results/overlap_table.py --baseline $W/ch-noddp.h5 $W/ch-*.h5
} > $W/channels.log 2>&1
grep "^|" $W/precision_bench.log | head -6; grep "^|" $W/overlap_bench.log | head -6; tail -3 $W/overlap_bench.log; cat $W/channels.log
tar czf $OUT/s3last.tgz -C /tmp s3last
