#!/usr/bin/env bash
# Final check of the session's last build on 2 x H200: every GPU test, the 2-GPU tests, and a
# ViT-L/32 run that saves its weights and a second that starts from them (with --no-overlap).
set -u
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPI="mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -np 2"
{
  carry/gpu_tests; echo "gpu_tests exit $?"
  $MPI carry/gpu_mpi_tests; echo "gpu_mpi_tests exit $?"
  $MPI carry/vitddp --warmup-steps 3 --steps 5 --progress-every 100 --out $OUT/save.h5 --save-weights /tmp/w.h5; echo "save exit $?"
  $MPI carry/vitddp --warmup-steps 3 --steps 5 --progress-every 100 --no-overlap --init-from /tmp/w.h5 --out $OUT/initfrom-nooverlap.h5; echo "init-from exit $?"
} > $OUT/final.log 2>&1
grep -E "exit|All tests|test cases|FAILED|steps/s|transport|weights" $OUT/final.log
