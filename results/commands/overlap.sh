#!/usr/bin/env bash
# NCCL's all-reduce beside backward on 2 GPUs: what the NCCL and cuBLASLt levers do to the share
# of the 1-GPU figure. Per precision (PRECISIONS, default "bf16 tf32 fp32"): the 1-GPU run
# (--no-ddp), NCCL with its defaults (25 MiB buckets), --nccl-max-ctas 2/4/8/16 (SMs NCCL may
# take), --gemm-sm-carveout 8/16 (backward's GEMMs planned for N fewer SMs), 100 MiB buckets and
# --compression bf16. With GPU_TESTS built, also gpu_tests "[overlap_bench]": on ONE GPU, backward
# beside a synthetic load (spinning blocks holding SMs, a copy kernel, a copy-engine copy) that
# splits backward into GEMMs and the rest.
# Usage: bash results/commands/overlap.sh OUT   |   bash results/commands/overlap.sh --readme DIR
#   GPU_TESTS=build/tests/gpu_tests; STEPS (timed steps per run, 100); CTAS="2 4 8 16"; CARVEOUTS="8 16".
# Writes into OUT: <precision>-<run>.h5 (packed into h5.tar.xz), overlap_bench.log, log.txt,
# README.md. About 5 minutes on 2 x H200.
TOPIC=overlap
TITLE="NCCL beside backward on 2 GPUs: CTA caps, GEMM SM carveout, buckets, NCCL settings"
NEED_GPUS=2
BASELINE='1gpu|noddp|np1'
GPU_TESTS=${GPU_TESTS:-build/tests/gpu_tests}
about() {
  cat <<'MD'
2 GPUs over NVLink, ViT-L/32, batch 32 per GPU, data on the GPU, CUDA graph; the share is the
2-GPU steps/s per GPU over the 1-GPU (`--no-ddp`) figure of the same precision in the same folder.
What is varied: NCCL's thread blocks (`--nccl-max-ctas N`), backward's GEMMs planned for fewer SMs
(`--gemm-sm-carveout N`: cuBLASLt's `CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET`, PyTorch's SM
carveout), the bucket capacity and bf16 compression; the overlap benchmark
(`gpu_tests "[overlap_bench]"`, `overlap_bench.log`) measures on one GPU what a load beside
backward costs its GEMMs and its other kernels.
MD
}
experiment() {
  local p k v
  for p in ${PRECISIONS:-bf16 tf32 fp32}; do
    vrun "$p-1gpu" 1 "$p"
    vrun "$p-nccl" 2 "$p"
    for k in ${CTAS:-2 4 8 16}; do vrun "$p-nccl-ctas$k" 2 "$p" --nccl-max-ctas "$k"; done
    for v in ${CARVEOUTS:-8 16}; do vrun "$p-nccl-carveout$v" 2 "$p" --gemm-sm-carveout "$v"; done
    vrun "$p-nccl-b100" 2 "$p" --bucket-cap-mb 100
    vrun "$p-nccl-bf16" 2 "$p" --compression bf16
  done
  if [ -x "$GPU_TESTS" ]; then
    timeout 300 "$GPU_TESTS" "[overlap_bench]" > "$OUT/overlap_bench.log" 2>&1 || status=1
    grep -E '^\| ' "$OUT/overlap_bench.log"
  fi
  pack
}
source "$(dirname "$0")/lib.sh"
main "$@"
