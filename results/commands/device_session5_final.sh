#!/usr/bin/env bash
# Issue "[4 of 8] Speed", session 5, last job (2 x H200), the build of this commit (carry/vitddp,
# carry/gpu_tests, carry/gpu_mpi_tests) and the build before the session's clean-up of the
# attention kernels and the cuDNN attention graph (carry/vitddp_before: f24373f's tree without
# its cuda/attention.cu and cuda/cudnn_attention.cpp changes):
#  1. every GPU test: gpu_tests on one GPU, gpu_mpi_tests on two;
#  2. the custom attention kernels' speed before and after their clean-up, alternating, 1 GPU,
#     tf32 and bf16 with --attention custom, bf16 with the default (cuDNN) attention, fp32;
#  3. every 2-GPU copy-engine cell of the target with the 1-GPU figure of each precision
#     (as device_session4_i.sh).
# Output tarred into $OUT.
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
W=/tmp/s5final; rm -rf $W; mkdir -p $W/ab $W/cells
# The four stripped binaries travel as carry/bins.tar.xz (the repository and them must stay under 64 MiB).
[ -f carry/bins.tar.xz ] && tar xJf carry/bins.tar.xz -C carry
{
  echo "== gpu_tests"
  timeout 240 carry/gpu_tests > $W/gpu_tests.log 2>&1
  echo "gpu_tests exit $?"
  tail -3 $W/gpu_tests.log
  echo "== gpu_mpi_tests"
  timeout 180 mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -np 2 carry/gpu_mpi_tests > $W/gpu_mpi_tests.log 2>&1
  echo "gpu_mpi_tests exit $?"
  grep -E "passed|failed|FAILED|equivalence" $W/gpu_mpi_tests.log | sort | uniq -c
  echo "== attention clean-up: before / after, 1 GPU"
  COMMON="--no-ddp --data device --warmup-steps 10 --steps 20 --cooldown-steps 0 --progress-every 100 --overwrite"
  for rep in 1 2; do
    for cell in "tf32 custom" "bf16 custom" "bf16 auto" "fp32 custom"; do
      set -- $cell
      for b in before after; do
        bin=carry/vitddp; [ $b = before ] && bin=carry/vitddp_before
        timeout 90 $bin --precision $1 --attention $2 $COMMON --out $W/ab/$1-$2-$b-r$rep.h5 2>&1 |
          grep -E "timed window|rror" | sed "s/^/$1 --attention $2, $b, repeat $rep: /"
      done
    done
  done
  echo "== 2-GPU copy-engine cells"
  SPECS="bf16:none:1:0:0 bf16:none:2:0:0:--allreduce,copy-engine bf16:bf16:2:0:0:--allreduce,copy-engine
tf32:none:1:0:0 tf32:none:2:0:0:--allreduce,copy-engine tf32:bf16:2:0:0:--allreduce,copy-engine
fp32:none:1:0:0 fp32:none:2:0:0:--allreduce,copy-engine fp32:bf16:2:0:0:--allreduce,copy-engine" \
    OUT=$W/cells timeout 200 bash results/commands/sweep_sm_carveout.sh > $W/cells/stdout.txt 2>&1
  grep -E "^\||rror|^## " $W/cells/stdout.txt
} 2>&1 | tee $W/log.txt
tar czf $OUT/s5final.tgz -C /tmp s5final
