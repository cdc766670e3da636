#!/usr/bin/env bash
# Issue "[4 of 8] Speed", session 6, job f (2 x H200): GEMM autotuning that times each candidate in
# three interleaved rounds of three queued runs (cuda/lt_gemm.cu fastest()), against the build
# before it (one batch of three runs per candidate). The 1-GPU bf16 figure moved 92.8-96.7 steps/s
# between runs of one build; the question is whether the algorithm choice was the cause.
#   carry/bins.tar.xz: vitddp (before), vitddp_new, gpu_tests_new (stripped).
# Alternating, six repeats of 1-GPU bf16, three of 1-GPU tf32 and of 2-GPU bf16 copy-engine; each
# run's wall time (start-up autotuning included) is printed beside its timed window.
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
W=/tmp/s6f; rm -rf $W; mkdir -p $W
[ -f carry/bins.tar.xz ] && tar xJf carry/bins.tar.xz -C carry
COMMON="--data device --warmup-steps 10 --steps 20 --cooldown-steps 0 --progress-every 100 --overwrite"
one() {  # one NAME BIN NP PRECISION [options]
  local name=$1 bin=$2 np=$3 p=$4; shift 4
  local ddp=""; [ "$np" = 1 ] && ddp="--no-ddp"
  local t0=$(date +%s.%N)
  timeout 120 mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -np $np $bin $ddp --precision $p "$@" $COMMON \
    --out $W/$name.h5 2>&1 | grep -E "timed window|rror" | sed "s/^/$name: /"
  echo "$name: wall $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
}
{
  echo "== gpu_tests (new build)"
  timeout 300 carry/gpu_tests_new > $W/gpu_tests_new.log 2>&1
  echo "gpu_tests exit $?"; tail -3 $W/gpu_tests_new.log
  for rep in 1 2 3 4 5 6; do
    for b in old new; do
      bin=carry/vitddp; [ $b = new ] && bin=carry/vitddp_new
      one bf16-np1-$b-r$rep $bin 1 bf16
      if [ $rep -le 3 ]; then
        one tf32-np1-$b-r$rep $bin 1 tf32
        one bf16-ce-$b-r$rep $bin 2 bf16 --allreduce copy-engine
      fi
    done
  done
} 2>&1 | tee $W/log.txt
tar czf $OUT/s6f.tgz -C /tmp s6f
