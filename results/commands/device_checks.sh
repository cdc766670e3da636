#!/usr/bin/env bash
# The build in carry/: its version, every GPU test (gpu_tests on one GPU, gpu_mpi_tests on two),
# then, unless BENCH=0, the speed benchmark (bench_speed.sh, ncu table of one bf16 step); all of it
# into $OUT/$JOB.tgz (log.txt, the test logs, bench/). Used by the sessions' job scripts
# (device_session7_f.sh, _g.sh, device_session8_b.sh, _e.sh), which set JOB and BENCH.
#   carry/bins.tar.xz: vitddp, gpu_tests, gpu_mpi_tests (stripped).
set -u -o pipefail
: "${JOB:?device_checks.sh: set JOB}"
source results/commands/lib_ab.sh
{
  carry/vitddp --version
  ab_tests
} 2>&1 | tee "$W/log.txt"
[ "${BENCH:-1}" = 0 ] || ab_bench_speed
ab_finish
