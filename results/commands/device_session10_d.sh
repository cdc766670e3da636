#!/usr/bin/env bash
# Session 10, job d: every GPU test at the session's last C++ (gpu_tests on 1 GPU, gpu_mpi_tests on
# 2 ranks), then one end-to-end run per precision and all-reduce on 2 GPUs (ViT-L/32 batch 32,
# data on the GPU, 10 warm-up + 100 timed steps) and the summary units of one file.
# Into $OUT/$JOB.tgz: log.txt, the test logs and the HDF5 files.
set -u -o pipefail
: "${JOB:?set JOB}"
source results/commands/lib_ab.sh
{
  carry/vitddp --version
  ab_tests
  solo bf16-solo0 0 bf16
  ab bf16-ce 2 bf16 vitddp --allreduce copy-engine
  ab tf32-ce-c16 2 tf32 vitddp --allreduce copy-engine --compression bf16
  ab fp32-nccl 2 fp32 vitddp
  python3 -c 'import h5py, sys; f = h5py.File(sys.argv[1], "r"); print({k: f["summary/" + k].attrs["units"] for k in ("steps_per_second", "images_per_second", "tflops_per_rank")})' "$W/bf16-ce.h5"
} 2>&1 | tee "$W/log.txt"
ab_finish
