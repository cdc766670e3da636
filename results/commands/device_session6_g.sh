#!/usr/bin/env bash
# Issue "[4 of 8] Speed", session 6, job g (2 x H200), the build of this commit:
#  1. gpu_mpi_tests on two GPUs (the autotuning change of a8eb0a9);
#  2. power and clocks: nvidia-smi samples every 20 ms (SM clock, memory clock, power draw,
#     power limit) during a 1-GPU bf16 run and a 2-GPU bf16 copy-engine run of 300 timed steps,
#     to see whether the 2-GPU step's extra HBM traffic costs SM clock under the power limit.
#   carry/bins.tar.xz: vitddp, gpu_mpi_tests (stripped).
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
W=/tmp/s6g; rm -rf $W; mkdir -p $W
[ -f carry/bins.tar.xz ] && tar xJf carry/bins.tar.xz -C carry
COMMON="--data device --warmup-steps 10 --steps 300 --cooldown-steps 0 --progress-every 1000 --overwrite"
sample() { nvidia-smi --query-gpu=timestamp,index,clocks.sm,clocks.mem,power.draw,power.limit,temperature.gpu \
             --format=csv,noheader,nounits -lms 20 > "$1" 2>/dev/null & SMI=$!; }
{
  carry/vitddp --version
  echo "== gpu_mpi_tests"
  timeout 200 mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -np 2 carry/gpu_mpi_tests > $W/gpu_mpi_tests.log 2>&1
  echo "gpu_mpi_tests exit $?"; tail -3 $W/gpu_mpi_tests.log
  for run in "np1 1 --no-ddp" "ce 2 --allreduce copy-engine"; do
    set -- $run
    sample $W/smi-$1.csv
    timeout 120 mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -np $2 carry/vitddp ${@:3} --precision bf16 $COMMON \
      --out $W/power-$1.h5 2>&1 | grep -E "timed window|rror" | sed "s/^/$1: /"
    kill $SMI; wait $SMI 2>/dev/null
  done
  python3 - "$W" <<'PY'
import csv, sys, statistics as st
w = sys.argv[1]
for run in ("np1", "ce"):
    rows = [r for r in csv.reader(open(f"{w}/smi-{run}.csv")) if len(r) >= 7]
    for gpu in sorted({r[1].strip() for r in rows}):
        busy = [r for r in rows if r[1].strip() == gpu and float(r[4]) > 300]  # samples under load
        if not busy:
            continue
        col = lambda i: [float(r[i]) for r in busy]
        print(f"{run} GPU {gpu}: {len(busy)} samples under load: SM clock median {st.median(col(2)):.0f} MHz "
              f"(min {min(col(2)):.0f}), memory clock {st.median(col(3)):.0f} MHz, power median {st.median(col(4)):.0f} W "
              f"(max {max(col(4)):.0f}) of {st.median(col(5)):.0f} W, temperature {st.median(col(6)):.0f} C")
PY
} 2>&1 | tee $W/log.txt
tar czf $OUT/s6g.tgz -C /tmp s6g
