#!/usr/bin/env bash
# Issue "[4 of 8] Speed", 2 x H200 NVLink: NCCL settings (environment variables) that change how
# the overlapped all-reduce competes with backward: user-buffer registration of the cudaMalloc'd
# gradients (NCCL_LEGACY_CUDA_REGISTER; the step is a CUDA graph, so NCCL registers captured
# buffers itself), protocol, algorithm, copy-engine P2P. vitddp ViT-L/32 batch 32, data on the GPU,
# 10 warm-up + 20 timed steps; 1-GPU baseline (--no-ddp) first; table by results/overlap_table.py.
# Run from the repository root with carry/vitddp and $OUT set. About 3 minutes.
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
VITDDP=${VITDDP:-carry/vitddp}
COMMON="--data device --warmup-steps 10 --steps 20 --cooldown-steps 0 --progress-every 100 --overwrite"
run() {  # run NAME NP "ENV=V ..." ARGS...
  local name=$1 np=$2 envs=$3; shift 3
  local xs=""
  for e in $envs; do xs="$xs -x $e"; done
  env $envs timeout 90 mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 $xs -np "$np" "$VITDDP" "$@" $COMMON \
    --out "$OUT/env-$name.h5" 2>&1 | grep -E "timed window|rror|REG|Register|register" | head -8 | sed "s/^/$name: /"
}
P=${PRECISION:-bf16}
{
  run $P-noddp 1 "" --precision $P --no-ddp
  run $P-default 2 "" --precision $P
  run $P-legacyreg 2 "NCCL_LEGACY_CUDA_REGISTER=1" --precision $P
  run $P-legacyreg-dbg 2 "NCCL_LEGACY_CUDA_REGISTER=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=REG" --precision $P
  run $P-legacyreg-ctas8 2 "NCCL_LEGACY_CUDA_REGISTER=1" --precision $P --nccl-max-ctas 8
  run $P-legacyreg-b100 2 "NCCL_LEGACY_CUDA_REGISTER=1" --precision $P --bucket-cap-mb 100
  run $P-ll128 2 "NCCL_PROTO=LL128" --precision $P
  run $P-tree 2 "NCCL_ALGO=Tree" --precision $P
  run $P-cememcpy 2 "NCCL_P2P_USE_CUDA_MEMCPY=1" --precision $P
  run $P-legacyreg-bf16c 2 "NCCL_LEGACY_CUDA_REGISTER=1" --precision $P --compression bf16
  echo; python3 results/overlap_table.py --baseline "$OUT/env-$P-noddp.h5" "$OUT"/env-$P-*.h5
} 2>&1 | tee "$OUT/sweep_nccl_env.log"
