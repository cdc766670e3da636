#!/usr/bin/env bash
# Issue 2 (fidelity) on one H200: PyTorch reference ("twin") files, parity of GpuViT + SGD with
# PyTorch on vit_b_32 (batch 4) and vit_l_32 (batch 2), the weights round trip vitddp -> torch,
# and the AdamW kernel. Run from the repository root on the GPU machine, with carry/gpu_tests
# built on the CPU machine (sm_90) and $OUT set:
#     bash results/commands/device_parity.sh
# Order (each step needs the one before): torch_twin.py writes twin_<model>.h5 -> gpu_tests
# "[parity]" compares and exports vitddp_<model>.h5 -> torch_twin.py --load writes
# torch_load_<model>.h5 -> gpu_tests "[roundtrip]" compares. The twin files are large (vit_l_32:
# 3 x 1.2 GB), so they stay in $VITDDP_TWIN_DIR on the GPU machine (default /tmp/vitddp_twin); the
# log and the parity table come back in $OUT.
set -u -o pipefail
export VITDDP_TWIN_DIR=${VITDDP_TWIN_DIR:-/tmp/vitddp_twin}
GPU_TESTS=${GPU_TESTS:-carry/gpu_tests}
TWIN="python3 tests/reference/torch_twin.py"
D=$VITDDP_TWIN_DIR
LOG=$OUT/parity.log
mkdir -p "$D"
status=0
run() { echo "== $*"; "$@"; local rc=$?; [ $rc -eq 0 ] || { echo "== FAILED (exit $rc): $*"; status=1; }; }
{
  date -u; nvidia-smi -L
  python3 -c "import torch, torchvision, h5py; print('torch', torch.__version__, 'torchvision', torchvision.__version__, 'h5py', h5py.__version__)"
  run $TWIN --model vit_b_32 --batch 4 --seed 0 --random-head --out "$D/twin_vit_b_32.h5"
  run $TWIN --model vit_l_32 --batch 2 --seed 0 --random-head --out "$D/twin_vit_l_32.h5"
  run "$GPU_TESTS" "[parity]" -d yes
  for m in vit_b_32 vit_l_32; do
    run $TWIN --load "$D/vitddp_$m.h5" --input "$D/twin_$m.h5" --out "$D/torch_load_$m.h5"
  done
  run "$GPU_TESTS" "[roundtrip]" -d yes
  run "$GPU_TESTS" "[adamw]"
  ls -la "$D"
} > "$LOG" 2>&1
grep '^| ' "$LOG" > "$OUT/parity_table.md"
echo "exit $status"; tail -c 6000 "$LOG"
exit $status
