#!/usr/bin/env bash
# Issue "[4 of 8] Speed", session 8, job b (2 x H200), the build of this commit (bf16 attention by
# default on the tensor-core kernels): every GPU test (gpu_tests on one GPU, gpu_mpi_tests on two),
# then the speed benchmark (bench_speed.sh, ncu table of one bf16 step), into $OUT/$JOB.tgz.
#   carry/bins.tar.xz: vitddp, gpu_tests, gpu_mpi_tests (stripped).
JOB=${JOB:-s8b} exec bash results/commands/device_checks.sh
