#!/usr/bin/env bash
# Issue "[4 of 8] Speed", session 7, job d (1-2 x H200): gelu_backward_bias with (64, 4)-thread
# blocks, each thread loading its 4 rows at once (cuda/gelu.cu), against the first version (128
# threads walking 16 rows in 4 batches; build 2d5b463).
#  1. gpu_tests "[gelu]" and the GPU-vs-CPU model tests ([gpu_vit]) of the new build; 2. bench_gpu_ops of the
#  new build; 3. A/B, interleaved: 1 GPU bf16 3 rounds, tf32 2 rounds.
#   carry/bins.tar.xz: vitddp, gpu_tests (new), vitddp_base.
set -u -o pipefail
JOB=${JOB:-s7d}
source results/commands/lib_ab.sh
{
  carry/vitddp --version
  ab_tests_subset "[gelu],[gpu_vit]"
  ab_bench gpu_tests
  ab_rounds 3 2
} 2>&1 | tee "$W/log.txt"
ab_finish
