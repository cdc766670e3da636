#!/usr/bin/env bash
# ZeRO-1 (--shard-optimizer) against DDP on all GPUs of one host, per precision (PRECISIONS,
# default "fp32 tf32 bf16"): each GPU alone first (solo0, solo1: the 1-GPU figures; the ranks run at
# the pace of the slower GPU), DDP over NCCL, DDP over the copy engines, DDP with bf16 compression,
# ZeRO-1 over NCCL, ZeRO-1 over the copy engines, and GPU 0 alone again at the end; the optimizer is OPTIMIZER (adamw: the state
# ZeRO-1 shards is largest).
# Usage: bash results/commands/zero.sh OUT  |  bash results/commands/zero.sh --readme DIR
#   PRECISIONS; OPTIMIZER [adamw]; STEPS (timed steps, 100).
# Writes into OUT: <precision>-<run>.h5 (packed into h5.tar.xz), log.txt, README.md. About 5
# minutes on 2 x H200.
TOPIC=zero
TITLE="ZeRO-1 against DDP: per-GPU speed and memory, ViT-L/32, batch 32 per GPU"
NEED_GPUS=2
BASELINE='solo0|1gpu|np1'
OPTIMIZER=${OPTIMIZER:-adamw}
about() {
  cat <<'MD'
All GPUs of one host, ViT-L/32, batch 32 per GPU, data on the GPU, CUDA graph, the optimizer of
the job (`--optimizer`, AdamW unless said). `zero` runs `--shard-optimizer` (ZeRO stage 1: each
bucket reduce-scattered as backward produces it, the update on this rank's shard, the fp32
parameters all-gathered and overlapped with the next forward), `zero-ce` the same with `--allreduce
copy-engine`; `nccl`, `ce` (`--allreduce copy-engine`) and `ce-bf16` (with `--compression bf16`)
are DDP. The share is the per-GPU steps/s
over GPU 0 alone (`solo0`) in the same precision and folder. Device memory per rank is in each
file (`memory/` and the start-up line; `--dry-run` gives the same figure).
MD
}
experiment() {
  local p n=$NGPU
  for p in ${PRECISIONS:-fp32 tf32 bf16}; do
    solo "$p-solo0" 0 "$p" --optimizer "$OPTIMIZER"; solo "$p-solo1" 1 "$p" --optimizer "$OPTIMIZER"
    vrun "$p-nccl" "$n" "$p" --optimizer "$OPTIMIZER"
    vrun "$p-ce" "$n" "$p" --optimizer "$OPTIMIZER" --allreduce copy-engine
    vrun "$p-ce-bf16" "$n" "$p" --optimizer "$OPTIMIZER" --allreduce copy-engine --compression bf16
    vrun "$p-zero" "$n" "$p" --optimizer "$OPTIMIZER" --shard-optimizer
    vrun "$p-zero-ce" "$n" "$p" --optimizer "$OPTIMIZER" --shard-optimizer --allreduce copy-engine
    solo "$p-solo0-end" 0 "$p" --optimizer "$OPTIMIZER"
  done
  pack
}
source "$(dirname "$0")/lib.sh"
main "$@"
