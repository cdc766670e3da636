#!/usr/bin/env bash
# Issue 4 (speed), run-time precision, on one H200: correctness of the fp32/tf32/bf16 paths, the
# Catch2 step benchmark, then vitddp and PyTorch (torchvision vit_l_32, batch 32, SGD,
# CrossEntropyLoss, data on the GPU, 10 warm-up + 20 timed steps) alternating per precision, and
# a side-by-side table. Run from the repository root on the GPU machine, with the binaries built on
# the CPU machine in carry/ (cp build-prec/vitddp build-prec/tests/gpu_tests carry/) and $OUT set:
#     bash results/commands/bench_precision.sh
# Writes to $OUT: bench_precision.log (everything), bench_precision_table.md (the table),
# vitddp-vit_l_32-<p>.h5, torch-<p>.json, mem-<who>-<p>.txt (nvidia-smi samples, MiB).
# About 4 minutes. VITDDP=..., GPU_TESTS=... override the binaries; SKIP_TESTS=1 skips step 1.
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
VITDDP=${VITDDP:-carry/vitddp}
GPU_TESTS=${GPU_TESTS:-carry/gpu_tests}
MPI="mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -np 1"
LOG=$OUT/bench_precision.log
status=0
run() { echo "== $*"; "$@"; local rc=$?; [ $rc -eq 0 ] || { echo "== FAILED (exit $rc): $*"; status=1; }; }
# Peak device memory as nvidia-smi sees it (whole process: context, libraries, allocations), MiB.
mem_start() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 100 > "$1" 2>/dev/null & MEM_PID=$!; }
mem_stop() { kill "$MEM_PID" 2>/dev/null; wait "$MEM_PID" 2>/dev/null; }
{
  date -u; nvidia-smi -L
  python3 -c "import torch, torchvision; print('torch', torch.__version__, 'torchvision', torchvision.__version__)"
  if [ "${SKIP_TESTS:-0}" != 1 ]; then
    # 1. Correctness first: every non-hidden GPU test - among them the bf16/TF32 kernels against
    #    host loops and GpuViT against CpuViT<float> in every precision (fp32 1e-5/1e-4, tf32 5e-3,
    #    bf16 3e-2), accumulate / on_ready / determinism per precision.
    run "$GPU_TESTS" -d yes
  fi
  # 2. Where the time goes: the step per precision (with GEMM share), then per-op times.
  run "$GPU_TESTS" "[precision_bench]"
  run "$GPU_TESTS" "[precision_ops]"
  # 3. vitddp and PyTorch, alternating.
  for p in fp32 tf32 bf16; do
    mem_start "$OUT/mem-vitddp-$p.txt"
    run $MPI "$VITDDP" --no-ddp --data device --precision "$p" --warmup-steps 10 --steps 20 --cooldown-steps 0 \
        --progress-every 10 --overwrite --out "$OUT/vitddp-vit_l_32-$p.h5"
    mem_stop
    mem_start "$OUT/mem-torch-$p.txt"
    run python3 results/bench_torch_vit.py --precision "$p" --warmup-steps 10 --steps 20 --json "$OUT/torch-$p.json"
    mem_stop
  done
  # 4. Side by side.
  python3 - "$OUT" <<'PY'
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
  date -u
} > "$LOG" 2>&1
echo "exit $status"; grep -E '^\| |^vit_l_32|GEMMs of one block|custom kernels|convert_to_bf16|FAILED|test cases|timed window' "$LOG" | tail -c 8000
exit $status
