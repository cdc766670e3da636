#!/usr/bin/env bash
# Session 9, job d: the speed benchmark (bench_speed.sh: 1 GPU against PyTorch, GPU 1 alone, the
# 2-GPU cells, nvidia-smi clocks and power of every run) with the build in carry/. Every GPU test
# of this build ran in job a (device_session9_a.sh); only scripts changed since.
# Into $OUT/$JOB.tgz: log.txt, bench/.
set -u -o pipefail
: "${JOB:?set JOB}"
source results/commands/lib_ab.sh
carry/vitddp --version 2>&1 | tee "$W/log.txt"
ab_bench_speed
ab_finish
