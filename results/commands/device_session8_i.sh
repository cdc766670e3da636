#!/usr/bin/env bash
# Issue "[4 of 8] Speed", session 8, job i (1 x H200 of 2), the build of this commit: every test of
# gpu_tests (job h's only failure was the tf32 test's own assertion at T = 1, fixed here).
#   carry/bins.tar.xz: vitddp, gpu_tests (stripped).
set -u -o pipefail
JOB=${JOB:-s8i}
source results/commands/lib_ab.sh
{
  carry/vitddp --version
  echo "== gpu_tests"
  timeout 150 carry/gpu_tests > "$W/gpu_tests.log" 2>&1
  echo "gpu_tests exit $?"; tail -3 "$W/gpu_tests.log"; grep "attention tf32" "$W/gpu_tests.log"
} 2>&1 | tee "$W/log.txt"
ab_finish
