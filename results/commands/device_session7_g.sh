#!/usr/bin/env bash
# Issue "[4 of 8] Speed", session 7, job g (2 x H200), the build of this commit: every GPU test
# (gpu_tests on one GPU, gpu_mpi_tests on two), after the review fixes (LayerNorm scratch sized for
# every smaller row count, gelu_backward_bias grid limit, more LayerNorm shapes), into $OUT/s7g.tgz.
#   carry/bins.tar.xz: vitddp, gpu_tests, gpu_mpi_tests (stripped).
JOB=${JOB:-s7g} BENCH=0 exec bash results/commands/device_checks.sh
