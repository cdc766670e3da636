#!/usr/bin/env bash
# ZeRO-1 (--shard-optimizer) against DDP and against PyTorch's data-parallel peers on all GPUs of one
# host, per precision (PRECISIONS, default "fp32 tf32 bf16"), in one job: each GPU alone first (solo0,
# solo1: the 1-GPU figures; the ranks run at the pace of the slower GPU), DDP over NCCL, DDP over the
# copy engines, DDP with bf16 compression, ZeRO-1 over NCCL, ZeRO-1 over the copy engines, under bf16
# also ZeRO-1 with fp32 parameter all-gathers (--allgather-dtype fp32; the default gathers bf16
# there); then PyTorch (results/bench_torch_ddp.py, same model, batch and optimizer): 1 GPU eager and
# compiled (torch.compile reduce-overhead), DDP eager and compiled, DDP + ZeroRedundancyOptimizer,
# FSDP2; and GPU 0 alone again at the end. The optimizer is OPTIMIZER for both tools (adamw: the
# state ZeRO-1 shards is largest; bench_torch_ddp.py's AdamW takes vitddp's defaults).
# Usage: bash results/commands/zero.sh OUT  |  bash results/commands/zero.sh --readme DIR
#   PRECISIONS; OPTIMIZER [adamw]; STEPS (timed steps, 100); NO_TORCH=1 leaves PyTorch out;
#   TORCH_PYTHON (a python3 with torch and torchvision) [$PYTHON]; TORCH_TIMEOUT and
#   TORCH_COMPILE_TIMEOUT: seconds one eager / compiled PyTorch run may take [300, 600].
# Writes into OUT: <precision>-<run>.h5 (packed into h5.tar.xz), torch-<precision>-<run>.json (a
# PyTorch run that failed or ran out of time: torch-<precision>-<run>.failed, its reason, and its last
# lines in log.txt; the job goes on), log.txt, peers_table.md (results/tools/ddp_peers_table.py),
# README.md. About 20 to 30 minutes on 2 x H200 (7 to 13 without PyTorch).
TOPIC=zero
TITLE="ZeRO-1 against DDP and PyTorch's data-parallel peers: per-GPU speed and memory, ViT-L/32, batch 32 per GPU"
NEED_GPUS=2
BASELINE='solo0|1gpu|np1'
OPTIMIZER=${OPTIMIZER:-adamw}
TORCH_PY=${TORCH_PYTHON:-${PYTHON:-python3}}
about() {
  cat <<'MD'
All GPUs of one host, ViT-L/32, batch 32 per GPU, data on the GPU, the optimizer of the job
(`--optimizer`, AdamW unless said) for vitddp and PyTorch alike. vitddp (CUDA graph): `zero` runs
`--shard-optimizer` (ZeRO stage 1: each bucket reduce-scattered as backward produces it, the update
on this rank's shard, the parameters all-gathered and overlapped with the next forward; in fp32 and
tf32 the fp32 parameters, in bf16 bf16 copies of them by default, `--allgather-dtype auto`),
`zero-fp32gather` the same in bf16 with `--allgather-dtype fp32`, `zero-ce` with `--allreduce
copy-engine`; `nccl`, `ce` (`--allreduce copy-engine`) and `ce-bf16` (with `--compression bf16`)
are DDP; `solo0`, `solo1`, `solo0-end`: one GPU alone. PyTorch (`results/bench_torch_ddp.py`, each
under `mpirun`): `torch-<p>-1gpu` and `-1gpu-compile` (`--no-ddp`, eager and `torch.compile`
reduce-overhead), `-ddp` and `-ddp-compile` (DistributedDataParallel), `-zero1` (DDP +
ZeroRedundancyOptimizer), `-fsdp` (FSDP2 `fully_shard`, bf16 parameter all-gathers under bf16).

The comparison is fair on the optimizer: both tools run the same one. With AdamW (the default
here, since the optimizer state is what ZeRO-1 shards; plain SGD has none) PyTorch runs
`torch.optim.AdamW(fused=True)` with vitddp's defaults (lr 0.001, betas (0.9, 0.999), eps 1e-8,
weight decay 0), so vitddp's cells need no SGD twins. The share is the per-GPU steps/s over the same
tool's 1-GPU run in the same precision and folder (vitddp: `solo0`; PyTorch: the 1-GPU run of the
same compile mode); "vs best PyTorch" divides a vitddp cell by the fastest PyTorch run with the
same GPU count. A PyTorch run that failed or ran out of time is a "failed" row (and in `log.txt`).
Device memory per rank is in each file (`memory/` and the start-up line; `--dry-run` gives the
same figure; PyTorch's peak in its JSON).
MD
}
includes() {  # the vitddp-against-PyTorch table, per precision, from the folder's files
  local d=$1
  { echo "## vitddp against PyTorch's data-parallel peers (results/tools/ddp_peers_table.py)"; echo
    "$PY" "$REPO/results/tools/ddp_peers_table.py" "$d" --baseline "$BASELINE"; } > "$d/peers_table.md" &&
    echo "$d/peers_table.md"
}
# trun NAME RANKS SECONDS PRECISION [bench_torch_ddp.py options]: one PyTorch run under mpirun into
# $OUT/NAME.json, on its own rendezvous port; one that fails or runs past SECONDS leaves
# $OUT/NAME.failed ("RANKS PRECISION reason", read by ddp_peers_table.py) and its last lines here.
TORCH_PORT=29500
trun() {
  local name=$1 n=$2 lim=$3 p=$4 rc why log; shift 4
  log=$(mktemp)
  TORCH_PORT=$((TORCH_PORT + 1))
  rm -f "$OUT/$name.json" "$OUT/$name.failed"
  timeout -k 30 "$lim" "${MPI[@]}" -np "$n" "$TORCH_PY" "$REPO/results/bench_torch_ddp.py" --precision "$p" \
    --optimizer "$OPTIMIZER" --warmup-steps "$WARMUP" --steps "$STEPS" --master-port "$TORCH_PORT" \
    --json "$OUT/$name.json" "$@" > "$log" 2>&1
  rc=$?
  if [ $rc -eq 0 ] && [ -s "$OUT/$name.json" ]; then
    grep -o 'steps_per_s=[^ ]*' "$log" | head -n 1 | sed "s/^/$name: /"
  else
    why="exit $rc"
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then why="timed out after $lim s"
    else why="$why: $(grep -E 'Error|error' "$log" | tail -n 1 | tr '|' '/' | cut -c1-160)"; fi
    echo "$n $p $why" > "$OUT/$name.failed"
    echo "$name: FAILED ($why); its last lines:"; tail -n 5 "$log" | sed "s/^/$name:   /"
    rm -f "$OUT/$name.json"
  fi
  rm -f "$log"
}
torch_cells() {  # torch_cells PRECISION: PyTorch's 1-GPU baselines and multi-GPU peers
  local p=$1 n=$NGPU e=${TORCH_TIMEOUT:-300} c=${TORCH_COMPILE_TIMEOUT:-600}
  trun "torch-$p-1gpu" 1 "$e" "$p" --no-ddp
  trun "torch-$p-1gpu-compile" 1 "$c" "$p" --no-ddp --compile reduce-overhead
  trun "torch-$p-ddp" "$n" "$e" "$p" --strategy ddp
  trun "torch-$p-ddp-compile" "$n" "$c" "$p" --strategy ddp --compile reduce-overhead
  trun "torch-$p-zero1" "$n" "$e" "$p" --strategy zero1
  trun "torch-$p-fsdp" "$n" "$e" "$p" --strategy fsdp
}
experiment() {
  local p n=$NGPU o=(--optimizer "$OPTIMIZER")
  for p in ${PRECISIONS:-fp32 tf32 bf16}; do
    solo "$p-solo0" 0 "$p" "${o[@]}"; solo "$p-solo1" 1 "$p" "${o[@]}"
    vrun "$p-nccl" "$n" "$p" "${o[@]}"
    vrun "$p-ce" "$n" "$p" "${o[@]}" --allreduce copy-engine
    vrun "$p-ce-bf16" "$n" "$p" "${o[@]}" --allreduce copy-engine --compression bf16
    vrun "$p-zero" "$n" "$p" "${o[@]}" --shard-optimizer
    [ "$p" = bf16 ] && vrun "$p-zero-fp32gather" "$n" "$p" "${o[@]}" --shard-optimizer --allgather-dtype fp32
    vrun "$p-zero-ce" "$n" "$p" "${o[@]}" --shard-optimizer --allreduce copy-engine
    [ "${NO_TORCH:-0}" = 1 ] || torch_cells "$p"
    solo "$p-solo0-end" 0 "$p" "${o[@]}"
  done
  pack
}
source "$(dirname "$0")/lib.sh"
main "$@"
