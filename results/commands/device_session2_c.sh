#!/usr/bin/env bash
# Session 2, third device batch (2 x H200): the speed benchmark against PyTorch (1 and 2 GPUs,
# per-kernel table), the 2-GPU checkpoint/resume comparison, and the memory-estimate GPU tests.
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
C=/tmp/C; mkdir -p $C/bench $C/resume
OUT=$C/bench timeout 330 bash results/commands/bench_speed.sh > $C/bench/stdout.txt 2>&1
FMNIST=carry/fmnist OUT=$C/resume timeout 170 bash results/commands/device_resume.sh > $C/resume/stdout.txt 2>&1
timeout 40 carry/gpu_tests "[memory]" > $C/memory_tests.log 2>&1; echo "exit $?" >> $C/memory_tests.log
tar czf $OUT/C.tgz -C $C .
grep -E '^\| |^## |^- |Kernels of one step|FAILED' $C/bench/bench_speed.log | tail -60
grep -E "^PASS|^FAIL|skip" $C/resume/stdout.txt; tail -3 $C/memory_tests.log
