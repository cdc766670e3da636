#!/usr/bin/env bash
# Parity with PyTorch (torchvision) on one GPU: tests/reference/torch_twin.py builds torchvision's
# vit_b_32 (batch 4) and vit_l_32 (batch 2) with seed 0 and a random head, runs forward, backward
# and 3 SGD steps in strict fp32 and writes them to HDF5; gpu_tests "[parity]" loads the same
# parameters by name into vitddp's GPU model and compares; vitddp's exported weights are loaded by
# torchvision (load_state_dict(strict=True)) and gpu_tests "[roundtrip]" compares the logits;
# gpu_tests "[adamw]" checks the AdamW kernel.
# Usage: bash results/commands/parity.sh OUT   |   bash results/commands/parity.sh --readme DIR
#   GPU_TESTS=build/tests/gpu_tests; VITDDP_TWIN_DIR (default /tmp/vitddp_twin) holds the twin
#   files (vit_l_32: 3 x 1.2 GB), which stay out of OUT. Needs torch, torchvision and h5py.
# Writes into OUT: log.txt (everything), parity_table.md (the table), README.md. About 2 minutes.
TOPIC=parity
TITLE="Parity with torchvision: logits, gradients and SGD steps (vit_b_32, vit_l_32)"
NEED_GPUS=1
NEED_VITDDP=0
GPU_TESTS=${GPU_TESTS:-build/tests/gpu_tests}
about() {
  cat <<'MD'
vitddp's GPU model against torchvision's `VisionTransformer` with the same parameters (loaded by
name), strict fp32: norm-relative error of the logits, the loss, every parameter's gradient (the
worst is named) and the parameters after 3 SGD steps; then the round trip (vitddp's exported
weights loaded by torchvision with `load_state_dict(strict=True)`, logits compared). The table is
the one the Catch2 tests print (`parity.log`); no HDF5 file is kept (the reference files are
1.2 GB each), so the table stands as measured.
MD
}
includes() { [ -s "$1/parity.log" ] && grep '^| ' "$1/parity.log" > "$1/parity_table.md"; echo "$1/parity_table.md"; }
experiment() {
  export VITDDP_TWIN_DIR=${VITDDP_TWIN_DIR:-/tmp/vitddp_twin}
  local twin=("$PY" "$REPO/tests/reference/torch_twin.py") d=$VITDDP_TWIN_DIR m
  mkdir -p "$d"
  [ -x "$GPU_TESTS" ] || die "GPU_TESTS=$GPU_TESTS: not built (cmake --build build --target gpu_tests)"
  {
    "$PY" -c "import torch, torchvision, h5py; print('torch', torch.__version__, 'torchvision', torchvision.__version__, 'h5py', h5py.__version__)"
    "${twin[@]}" --model vit_b_32 --batch 4 --seed 0 --random-head --out "$d/twin_vit_b_32.h5" || status=1
    "${twin[@]}" --model vit_l_32 --batch 2 --seed 0 --random-head --out "$d/twin_vit_l_32.h5" || status=1
    "$GPU_TESTS" "[parity]" -d yes || status=1
    for m in vit_b_32 vit_l_32; do
      "${twin[@]}" --load "$d/vitddp_$m.h5" --input "$d/twin_$m.h5" --out "$d/torch_load_$m.h5" || status=1
    done
    "$GPU_TESTS" "[roundtrip]" -d yes || status=1
    "$GPU_TESTS" "[adamw]" || status=1
  } > "$OUT/parity.log" 2>&1
  tail -c 4000 "$OUT/parity.log"
}
source "$(dirname "$0")/lib.sh"
main "$@"
