#!/usr/bin/env bash
# Run-time precision on one GPU: the correctness of the fp32/tf32/bf16 paths (every GPU test), the
# Catch2 step benchmark "[precision_bench]" (the step per precision and its GEMM share) and the
# per-GEMM times "[precision_ops]", then vitddp (--no-ddp --data device --precision P, 10 warm-up +
# 20 timed steps) and PyTorch (results/bench_torch_vit.py: torchvision vit_l_32, batch 32, SGD,
# data on the GPU) alternating per precision, and a side-by-side table.
# Usage: bash results/commands/precision.sh OUT   |   bash results/commands/precision.sh --readme DIR
#   GPU_TESTS=build/tests/gpu_tests (the Catch2 GPU tests; SKIP_TESTS=1 skips the full suite).
# Writes into OUT: log.txt, bench_precision_table.md, vitddp-vit_l_32-<p>.h5, torch-<p>.json,
# mem-<who>-<p>.txt (nvidia-smi samples, MiB), README.md. About 4 minutes.
TOPIC=precision
TITLE="Run-time precision on one GPU: fp32, tf32, bf16 against PyTorch"
NEED_GPUS=1
WARMUP=10 STEPS=20
GPU_TESTS=${GPU_TESTS:-build/tests/gpu_tests}
about() {
  cat <<'MD'
One GPU, ViT-L/32, batch 32, SGD, data on the GPU, 10 warm-up + 20 timed steps per precision:
`--precision fp32` (strict fp32 GEMMs), `tf32` (TF32 tensor cores, fp32 accumulation) and `bf16`
(torch.autocast semantics: bf16 GEMM operands, fp32 accumulation, fp32 master weights and
gradients), each next to PyTorch 2.11 in the same precision (`torch-<p>.json`). The log also holds
`gpu_tests "[precision_bench]"` (the step per precision and the GEMMs' share of it) and
`"[precision_ops]"` (per-GEMM times). Peak memory: nvidia-smi's peak of the process (`mem-*.txt`).
MD
}
precision_table() {  # precision_table DIR: DIR/bench_precision_table.md from the files in DIR
  "$PY" - "$1" <<'PY'
import json, os, sys
import h5py
out = sys.argv[1]
def peak(path):
    try:
        v = [float(x) for x in open(path).read().split() if x.strip()]
        return max(v) if v else float("nan")
    except OSError:
        return float("nan")
rows = []
for p in ("fp32", "tf32", "bf16"):
    v = t = None
    try:
        with h5py.File(os.path.join(out, f"vitddp-vit_l_32-{p}.h5"), "r") as f:
            s = {k: float(d[()]) for k, d in f["summary"].items()}
            assert f.attrs["precision"] in (p, p.encode()), f.attrs["precision"]
            v = s
    except Exception as e:  # noqa: BLE001 - report and go on
        print(f"vitddp {p}: {e}")
    try:
        t = json.load(open(os.path.join(out, f"torch-{p}.json")))
    except Exception as e:  # noqa: BLE001
        print(f"torch {p}: {e}")
    rows.append((p, v, t, peak(os.path.join(out, f"mem-vitddp-{p}.txt")), peak(os.path.join(out, f"mem-torch-{p}.txt"))))
target = {"fp32": 1.1, "tf32": 2.5, "bf16": 5.0}
nan = float("nan")
lines = ["| precision | vitddp steps/s | PyTorch steps/s | ratio (target) | vitddp ms/step (median) | PyTorch ms/step (median) "
         "| vitddp images/s | PyTorch images/s | vitddp TFLOP/s | PyTorch TFLOP/s | PyTorch max_memory_allocated GiB "
         "| nvidia-smi peak GiB vitddp / PyTorch |",
         "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
for p, v, t, mv, mt in rows:
    vs = v["steps_per_second"] if v else nan
    ts = t["steps_per_s"] if t else nan
    lines.append(f"| {p} | {vs:.2f} | {ts:.2f} | {vs / ts:.2f} (>= {target[p]}) | "
                 f"{(v['median_step_time'] * 1e3 if v else nan):.2f} | {(t['median_step_ms'] if t else nan):.2f} | "
                 f"{(v['images_per_second_per_rank'] if v else nan):.0f} | {(t['images_per_s'] if t else nan):.0f} | "
                 f"{(v['tflops_per_rank'] if v else nan):.1f} | {(t['tflops'] if t else nan):.1f} | "
                 f"{(t['peak_mem_allocated_bytes'] / 2**30 if t else nan):.2f} | {mv / 1024:.2f} / {mt / 1024:.2f} |")
table = "\n".join(lines)
print(table)
open(os.path.join(out, "bench_precision_table.md"), "w").write(table + "\n")
PY

}
includes() { precision_table "$1" > /dev/null && echo "$1/bench_precision_table.md"; }
mem_start() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 100 > "$1" 2>/dev/null & MEM_PID=$!; }
mem_stop() { kill "$MEM_PID" 2>/dev/null; wait "$MEM_PID" 2>/dev/null; }
experiment() {
  local p
  "$PY" -c "import torch, torchvision; print('torch', torch.__version__, 'torchvision', torchvision.__version__)"
  if [ -x "$GPU_TESTS" ]; then
    [ "${SKIP_TESTS:-0}" = 1 ] || "$GPU_TESTS" -d yes || status=1
    "$GPU_TESTS" "[precision_bench]" || status=1
    "$GPU_TESTS" "[precision_ops]" || status=1
  else
    echo "GPU_TESTS=$GPU_TESTS: not built; the Catch2 benchmarks are left out"
  fi
  for p in fp32 tf32 bf16; do
    mem_start "$OUT/mem-vitddp-$p.txt"; vrun "vitddp-vit_l_32-$p" 1 "$p"; mem_stop
    mem_start "$OUT/mem-torch-$p.txt"
    "$PY" "$REPO/results/bench_torch_vit.py" --precision "$p" --warmup-steps 10 --steps 20 --json "$OUT/torch-$p.json" || status=1
    mem_stop
  done
  precision_table "$OUT"
}
source "$(dirname "$0")/lib.sh"
main "$@"
