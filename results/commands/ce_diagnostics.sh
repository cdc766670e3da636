#!/usr/bin/env bash
# Issue "[4 of 8] Speed", session 4: where the copy-engine all-reduce's remaining cost comes from.
# Runs an EXPERIMENT build (carry/vitddp_exp: the build of this commit plus two environment
# switches that are not in the repository: VITDDP_EXP_CE_SKIP=sum|copies leaves out the sum
# kernel or the data copies (flags and waits stay; results are wrong, timing only) and
# VITDDP_EXP_COMM_PRIO=low puts the comm stream at low priority) next to the 1-GPU figure.
# vitddp ViT-L/32 batch 32, data on the GPU, 10 warm-up + 20 timed steps, each run twice.
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
COMMON="--data device --warmup-steps 10 --steps 20 --cooldown-steps 0 --progress-every 100 --overwrite"
run() {  # name ranks precision env... -- extra options
  local name=$1 n=$2 p=$3; shift 3
  local envs=() xs=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); xs+=(-x "${1%%=*}"); shift; done
  [ $# -gt 0 ] && shift
  local ddp=""; [ "$n" = 1 ] && ddp="--no-ddp"
  env "${envs[@]}" timeout 90 mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 "${xs[@]}" -np "$n" carry/vitddp_exp $ddp \
    --precision "$p" "$@" $COMMON --out "$OUT/diag-$name.h5" 2>&1 | grep -E "timed window|rror" | sed "s/^/$name: /"
}
{
  for rep in 1 2; do
    for p in bf16 tf32; do
      run $p-np1-r$rep 1 $p X=0
      run $p-nccl-r$rep 2 $p X=0
      run $p-ce-r$rep 2 $p X=0 -- --allreduce copy-engine
      run $p-ce-nosum-r$rep 2 $p VITDDP_EXP_CE_SKIP=sum -- --allreduce copy-engine
      run $p-ce-nocopies-r$rep 2 $p VITDDP_EXP_CE_SKIP=copies -- --allreduce copy-engine
      run $p-ce-lowprio-r$rep 2 $p VITDDP_EXP_COMM_PRIO=low -- --allreduce copy-engine
    done
  done
  for p in bf16 tf32; do
    for rep in 1 2; do
      echo; echo "## $p, repeat $rep"
      python3 results/overlap_table.py --baseline "$OUT/diag-$p-np1-r$rep.h5" $(ls "$OUT"/diag-$p-*-r$rep.h5 | grep -v np1)
    done
  done
} 2>&1 | tee "$OUT/ce_diagnostics.log"
