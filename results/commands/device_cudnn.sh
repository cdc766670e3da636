#!/usr/bin/env bash
# Issue 4 (speed), cuDNN vs custom, on one H200: the parity tests of the cuDNN paths, the Catch2
# benchmark [attention_bench] (attention core and patch embedding at vit_l_32 batch-32 shapes), then
# vitddp end to end (vit_l_32, batch 32, data on the GPU, 10 warm-up + 20 timed steps) for every
# --attention / --patch-embed combination in bf16 and both patch embeddings in fp32 and tf32, and a
# table of steps/s. Run from the repository root on the GPU machine, with the binaries built on the
# CPU machine in carry/ (cp build/vitddp build/tests/gpu_tests carry/) and $OUT set:
#     bash results/commands/device_cudnn.sh
# Writes to $OUT: device_cudnn.log (everything), cudnn_e2e_table.md, vitddp-<precision>-<attention>-
# <patch embed>.h5. About 3 minutes. VITDDP=..., GPU_TESTS=... override the binaries; SKIP_TESTS=1
# skips step 1.
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
VITDDP=${VITDDP:-carry/vitddp}
GPU_TESTS=${GPU_TESTS:-carry/gpu_tests}
MPI="mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -np 1"
OUT=${OUT:?set OUT to the output folder}
LOG=$OUT/device_cudnn.log
status=0
run() { echo "== $*"; "$@"; local rc=$?; [ $rc -eq 0 ] || { echo "== FAILED (exit $rc): $*"; status=1; }; }
{
  date -u; nvidia-smi -L
  ls -l /usr/lib/x86_64-linux-gnu/libcudnn.so* 2>/dev/null | head -3
  if [ "${SKIP_TESTS:-0}" != 1 ]; then
    # 1. Parity: cuDNN attention vs custom kernels and a double reference (B = 2, 7, 32; H = 16 and
    #    12; T = 50; dh = 64), cuDNN conv vs im2col + GEMM (fp32 1e-5, tf32 5e-3, bf16 1e-2), whole
    #    models with the cuDNN paths vs the default ones and vs CpuViT<float> (bf16 3e-2, fp32 1e-4),
    #    plus the existing custom attention and patch-embedding kernel tests.
    run timeout 300 "$GPU_TESTS" -d yes "[cudnn],[attention],[patch_embed]"
  fi
  # 2. Per-operation times, custom vs cuDNN (markdown tables).
  run timeout 120 "$GPU_TESTS" "[attention_bench]"
  # 3. End to end: every combination in bf16; the patch embeddings in fp32 and tf32 (cuDNN
  #    attention is bf16 only).
  for combo in bf16:custom:gemm bf16:cudnn:gemm bf16:custom:cudnn bf16:cudnn:cudnn \
               fp32:custom:gemm fp32:custom:cudnn tf32:custom:gemm tf32:custom:cudnn; do
    IFS=: read -r p a e <<<"$combo"
    run timeout 120 $MPI "$VITDDP" --no-ddp --data device --precision "$p" --attention "$a" --patch-embed "$e" \
        --warmup-steps 10 --steps 20 --cooldown-steps 0 --progress-every 10 --overwrite \
        --out "$OUT/vitddp-$p-$a-$e.h5"
  done
  # 4. Table.
  python3 - "$OUT" <<'PY'
import os, sys
import h5py
out = sys.argv[1]
lines = ["| precision | --attention | --patch-embed | steps/s | median ms/step | vs custom+gemm |",
         "| --- | --- | --- | ---: | ---: | ---: |"]
base = {}
for combo in ("bf16:custom:gemm bf16:cudnn:gemm bf16:custom:cudnn bf16:cudnn:cudnn "
              "fp32:custom:gemm fp32:custom:cudnn tf32:custom:gemm tf32:custom:cudnn").split():
    p, a, e = combo.split(":")
    path = os.path.join(out, f"vitddp-{p}-{a}-{e}.h5")
    try:
        with h5py.File(path, "r") as f:
            s = {k: float(d[()]) for k, d in f["summary"].items()}
        sps, ms = s["steps_per_second"], s["median_step_time"] * 1e3
    except Exception as ex:  # noqa: BLE001 - report and go on
        print(f"{path}: {ex}")
        sps = ms = float("nan")
    if a == "custom" and e == "gemm":
        base[p] = sps
    rel = sps / base[p] if base.get(p) else float("nan")
    lines.append(f"| {p} | {a} | {e} | {sps:.3f} | {ms:.2f} | {rel:.3f}x |")
table = "\n".join(lines)
print(table)
open(os.path.join(out, "cudnn_e2e_table.md"), "w").write(table + "\n")
PY
  date -u
} > "$LOG" 2>&1
echo "exit $status"
grep -E '^\| |^device |^cuDNN|^  B=|^patch embedding|^\[bf16|^\[fp32|^\[tf32|worst gradient|FAILED|test cases|Errors|^- |error' "$LOG" | tail -c 10000
exit $status
