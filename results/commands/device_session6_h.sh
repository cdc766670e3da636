#!/usr/bin/env bash
# Issue "[4 of 8] Speed", session 6, closing check (2 x H200), the build of this commit: every GPU
# test, gpu_tests on one GPU and gpu_mpi_tests on two, logs into $OUT/$JOB.tgz (JOB: s6h unless set;
# device_session6_e.sh runs it as s6e).
#   carry/bins.tar.xz: vitddp, gpu_tests, gpu_mpi_tests (stripped).
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
JOB=${JOB:-s6h}
W=/tmp/$JOB; rm -rf $W; mkdir -p $W
[ -f carry/bins.tar.xz ] && tar xJf carry/bins.tar.xz -C carry
{
  carry/vitddp --version
  echo "== gpu_tests"
  timeout 300 carry/gpu_tests > $W/gpu_tests.log 2>&1
  echo "gpu_tests exit $?"; tail -3 $W/gpu_tests.log
  echo "== gpu_mpi_tests"
  timeout 200 mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -np 2 carry/gpu_mpi_tests > $W/gpu_mpi_tests.log 2>&1
  echo "gpu_mpi_tests exit $?"; grep -a "assertions" $W/gpu_mpi_tests.log
} 2>&1 | tee $W/log.txt
tar czf $OUT/$JOB.tgz -C /tmp $JOB
