#!/usr/bin/env bash
# Issue "[4 of 8] Speed", session 6, last job (2 x H200), the build of this commit: every GPU test
# (device_session6_h.sh: gpu_tests on one GPU, gpu_mpi_tests on two; into $OUT/s6e.tgz), then every
# 2-GPU copy-engine cell of the target at 25 and 50 MiB buckets (device_session6_c.sh,
# which writes $OUT/s6c.tgz).
#   carry/bins.tar.xz: vitddp, gpu_tests, gpu_mpi_tests (stripped).
set -u -o pipefail
JOB=s6e bash results/commands/device_session6_h.sh
bash results/commands/device_session6_c.sh
