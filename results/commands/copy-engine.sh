#!/usr/bin/env bash
# The copy-engine all-reduce (--allreduce copy-engine) on 2 GPUs of one host against NCCL, and its
# settings: comm streams, bucket capacity, bf16 compression, GEMM SM carveout. Per precision
# (PRECISIONS, default "bf16 tf32"): each GPU alone first (solo0, solo1: the 1-GPU figures; DDP runs
# at the pace of the slower GPU), NCCL, copy-engine with --comm-streams 1/2/3, with
# --compression bf16, with 12 and 50 MiB buckets, with --gemm-sm-carveout 4 and 16, and GPU 0
# alone again at the end (the clocks drift with heat). 300 timed steps per run by default: a
# GPU's step time rises by 1-2% after the first 100 steps, as power and heat settle.
# Usage: bash results/commands/copy-engine.sh OUT  |  bash results/commands/copy-engine.sh --readme DIR
#   STEPS (timed steps, 300); STREAMS="1 2 3"; CAPS="12 50"; CARVEOUTS="4 16".
# Writes into OUT: <precision>-<run>.h5 (packed into h5.tar.xz), log.txt, README.md. About 8
# minutes on 2 x H200.
TOPIC=copy-engine
TITLE="The copy-engine all-reduce on 2 GPUs: transfers, comm streams, buckets, carveout"
NEED_GPUS=2
BASELINE='solo0|1gpu|np1'
STEPS=${STEPS:-300}
about() {
  cat <<'MD'
2 GPUs of one host over NVLink, ViT-L/32, batch 32 per GPU, data on the GPU, CUDA graph. The
copy-engine all-reduce (`--allreduce copy-engine`, `mpi/transports/copy_engine_allreduce_gpu.*`) reduce-scatters and
all-gathers each bucket with peer-to-peer `cudaMemcpyAsync` through CUDA IPC mappings (the GPUs'
copy engines, no SM), with one short sum kernel per bucket in between and stream memory waits as
the only synchronisation, all inside the step's CUDA graph. The share is the 2-GPU steps/s per GPU
over GPU 0 alone (`solo0`) in the same precision and folder; backward and exposed communication
are rank 0's medians.
MD
}
experiment() {
  local p s c v
  for p in ${PRECISIONS:-bf16 tf32}; do
    solo "$p-solo0" 0 "$p"; solo "$p-solo1" 1 "$p"
    vrun "$p-nccl" 2 "$p"
    for s in ${STREAMS:-1 2 3}; do vrun "$p-ce-s$s" 2 "$p" --allreduce copy-engine --comm-streams "$s"; done
    vrun "$p-ce-bf16" 2 "$p" --allreduce copy-engine --compression bf16
    for c in ${CAPS:-12 50}; do vrun "$p-ce-cap$c" 2 "$p" --allreduce copy-engine --bucket-cap-mb "$c"; done
    for v in ${CARVEOUTS:-4 16}; do vrun "$p-ce-carveout$v" 2 "$p" --allreduce copy-engine --gemm-sm-carveout "$v"; done
    solo "$p-solo0-end" 0 "$p"
  done
  pack
}
source "$(dirname "$0")/lib.sh"
main "$@"
