#!/usr/bin/env bash
# One GPU: the attention core of fp32 activations as batched cuBLAS GEMMs (--attention gemm)
# against the fp32-arithmetic custom kernels (--attention custom) on the models whose sequences
# the tensor-core kernels do not take: vit_b_16 (197 tokens) in tf32 and fp32, vit_l_16 and
# vit_h_14 (257 tokens) in tf32, ROUNDS (2) interleaved rounds (<model>-<p>-custom-r<r> / -gemm-r<r> /
# -gemm-recompute-r<r>: the probabilities recomputed in backward); custom runs 30 timed steps (it is
# slow), gemm STEPS.
# Usage: bash results/commands/attention-gemm.sh OUT   |   bash results/commands/attention-gemm.sh --readme DIR
#   ROUNDS (2); STEPS (timed steps of the gemm runs, 100); MODELS ("vit_b_16 vit_l_16 vit_h_14").
# Writes into OUT: the HDF5 files (packed into h5.tar.xz), log.txt, README.md (with OUT/tests.md
# appended when it exists: the GPU tests' result, written by hand). About 4 minutes.
TOPIC=attention-gemm
TITLE="Attention as batched GEMMs in fp32 and tf32, on one GPU"
NEED_GPUS=1
BASELINE='custom'
about() {
  cat <<'MD'
One GPU, `--no-ddp`, batch 32, data on the GPU, CUDA graph, SGD. `custom`: the attention core
in fp32 arithmetic, one warp per query or key row (the kernels for sequences beyond 64 tokens);
`gemm` (`--attention gemm`, what `--attention auto` picks for them in fp32 and tf32): one
cublasGemmBatchedEx per product over every (image, head) pair, pointer arrays into the packed
qkv layout, row softmax kernels, strict fp32 or TF32 as `--precision` says; `gemm-recompute`
(`--attention gemm-recompute`): the same, keeping no probabilities between forward and backward
(backward recomputes them). Rounds alternate the three; the share column is steps/s over the first `custom` run of the same precision in the folder
(the rows of other models compare with their own `custom` row by hand).
MD
}
includes() { [ -e "$1/tests.md" ] && echo "$1/tests.md"; }
experiment() {
  local r m p
  for ((r = 1; r <= ${ROUNDS:-2}; ++r)); do
    for m in ${MODELS:-vit_b_16 vit_l_16 vit_h_14}; do
      for p in tf32 fp32; do
        [ "$p" = fp32 ] && [ "$m" != vit_b_16 ] && continue
        STEPS=30 vrun "$m-$p-custom-r$r" 1 "$p" --model "$m" --attention custom
        vrun "$m-$p-gemm-r$r" 1 "$p" --model "$m" --attention gemm
        vrun "$m-$p-gemm-recompute-r$r" 1 "$p" --model "$m" --attention gemm-recompute
      done
    done
  done
  pack
}
source "$(dirname "$0")/lib.sh"
main "$@"
