#!/usr/bin/env bash
# Issue "[4 of 8] Speed", session 7, job a (2 x H200): the vectorized LayerNorm kernels (branch
# ln-vec, cuda/layernorm.cu) against the build without them (HEAD 0b78608).
#  1. every GPU test of the new build: gpu_tests on one GPU, gpu_mpi_tests on two;
#  2. bench_gpu_ops ("bench: per-operation times...") of both builds;
#  3. A/B, interleaved: 1 GPU bf16 and tf32, 3 rounds of 100 timed steps; 2 GPUs bf16 copy-engine,
#     2 rounds.
#   carry/bins.tar.xz: vitddp, gpu_tests, gpu_mpi_tests (new), vitddp_base, gpu_tests_base.
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
JOB=${JOB:-s7a}
W=/tmp/$JOB; rm -rf $W; mkdir -p $W
[ -f carry/bins.tar.xz ] && tar xJf carry/bins.tar.xz -C carry
COMMON="--data device --warmup-steps 10 --steps 100 --cooldown-steps 0 --progress-every 1000 --overwrite"
ab() {  # ab NAME NP PREC BIN [opts]
  local name=$1 n=$2 p=$3 bin=$4; shift 4
  local ddp=""; [ "$n" = 1 ] && ddp="--no-ddp"
  timeout 120 mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -np $n carry/$bin $ddp --precision $p "$@" $COMMON \
    --out $W/$name.h5 2>&1 | grep -E "timed window|rror" | sed "s/^/$name: /"
}
{
  carry/vitddp --version
  echo "== gpu_tests"
  timeout 300 carry/gpu_tests > $W/gpu_tests.log 2>&1
  echo "gpu_tests exit $?"; tail -3 $W/gpu_tests.log
  echo "== gpu_mpi_tests"
  timeout 200 mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -np 2 carry/gpu_mpi_tests > $W/gpu_mpi_tests.log 2>&1
  echo "gpu_mpi_tests exit $?"; grep -a "assertions" $W/gpu_mpi_tests.log
  for b in gpu_tests_base gpu_tests; do
    echo "== bench_gpu_ops, $b"
    timeout 120 carry/$b "bench: per-operation times at vit_l_32 batch-32 shapes" 2>&1 | grep -E "layernorm|column_sum|BGRADB|gelu"
  done
  for r in 1 2 3; do
    for p in bf16 tf32; do
      ab $p-base-r$r 1 $p vitddp_base
      ab $p-lnvec-r$r 1 $p vitddp
    done
  done
  for r in 1 2; do
    ab bf16-np2-base-r$r 2 bf16 vitddp_base --allreduce copy-engine
    ab bf16-np2-lnvec-r$r 2 bf16 vitddp --allreduce copy-engine
  done
} 2>&1 | tee $W/log.txt
tar czf $OUT/$JOB.tgz -C /tmp $JOB
