#!/usr/bin/env bash
# One GPU: a kernel change measured A/B, and the attention and patch-embedding implementations.
#   A/B (when VITDDP_BASE names a second vitddp binary, the build before the change): ROUNDS (3)
#     interleaved rounds of VITDDP_BASE and VITDDP, 1 GPU, bf16 and tf32, <p>-base-r<r> / <p>-new-r<r>.
#   Implementations: --attention custom / cudnn in bf16 (cuDNN's fused flash attention through the
#     cuDNN graph API, bf16 only), --patch-embed gemm / cudnn in fp32 and tf32.
#   With GPU_TESTS built: gpu_tests "[attention_bench]" (attention core and patch embedding at the
#     ViT-L/32 batch-32 shapes, CUDA events) and bench_gpu_ops (per-operation times).
# Usage: bash results/commands/kernels.sh OUT   |   bash results/commands/kernels.sh --readme DIR
#   VITDDP_BASE (optional); GPU_TESTS=build/tests/gpu_tests; STEPS (timed steps, 100).
# Writes into OUT: the HDF5 files (packed into h5.tar.xz), attention_bench.log, ops_bench.log,
# log.txt, README.md. About 3 minutes (6 with the A/B).
TOPIC=kernels
TITLE="Kernels on one GPU: A/B of kernel changes, attention and patch embedding"
NEED_GPUS=1
BASELINE='base|cudnn|before|old'
GPU_TESTS=${GPU_TESTS:-build/tests/gpu_tests}
about() {
  cat <<'MD'
One GPU, ViT-L/32, batch 32, data on the GPU, CUDA graph, 10 warm-up + 100 timed steps unless a
row says otherwise. A/B rows alternate the build before a change (`base`, `before`, `old`) with
the build after it (`new`, or the change's name) in interleaved rounds, so both see the same
clocks and heat; the share column is the run's steps/s over the first baseline run of its
precision in the same folder (`base`/`before`/`old`, or cuDNN for the attention rows).
MD
}
experiment() {
  local r p
  if [ -n "${VITDDP_BASE:-}" ]; then
    [ -x "$VITDDP_BASE" ] || die "VITDDP_BASE=$VITDDP_BASE: not an executable"
    local new=$VITDDP
    for ((r = 1; r <= ${ROUNDS:-3}; ++r)); do
      for p in bf16 tf32; do
        VITDDP=$VITDDP_BASE vrun "$p-base-r$r" 1 "$p"
        VITDDP=$new vrun "$p-new-r$r" 1 "$p"
      done
    done
    VITDDP=$new
  fi
  for ((r = 1; r <= ${ROUNDS:-3}; ++r)); do
    vrun "bf16-cudnn-r$r" 1 bf16 --attention cudnn
    vrun "bf16-custom-r$r" 1 bf16 --attention custom
  done
  for p in fp32 tf32; do
    vrun "$p-patch-gemm" 1 "$p" --patch-embed gemm
    vrun "$p-patch-cudnn" 1 "$p" --patch-embed cudnn
  done
  if [ -x "$GPU_TESTS" ]; then
    timeout 120 "$GPU_TESTS" "[attention_bench]" > "$OUT/attention_bench.log" 2>&1 || status=1
    grep -E '^\| ' "$OUT/attention_bench.log"
    timeout 120 "$GPU_TESTS" "bench: per-operation times at vit_l_32 batch-32 shapes" > "$OUT/ops_bench.log" 2>&1 || status=1
  fi
  pack
}
source "$(dirname "$0")/lib.sh"
main "$@"
