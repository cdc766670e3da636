"""`vitddp-report speed`: side-by-side speed table of vitddp and PyTorch from one benchmark job
(results/commands/speed.sh).

    vitddp-report speed OUTDIR > table.md

Reads, for each precision p in fp32, tf32, bf16:
  OUTDIR/vitddp-<p>-graph.h5, OUTDIR/vitddp-<p>-eager.h5   vitddp 1 GPU (--cuda-graph on / off)
  OUTDIR/vitddp-<p>-graph-gpu1.h5                          the same on GPU 1 (optional)
  OUTDIR/torch-<p>.json                                    results/bench_torch_vit.py
  OUTDIR/mem-<name>.txt                                    nvidia-smi memory.used samples, MiB
  OUTDIR/vitddp-<p>-np2-<compression>[-ce].h5              vitddp on 2 GPUs, NCCL / --allreduce
                                                           copy-engine (optional)
and prints: steps/s per GPU, images/s, TFLOP/s (3 x forward FLOPs x images/s), MFU against the
measured matmul ceiling of one H200 in that precision (8192^3 torch.matmul in
../shared/docs/DEVICE.md: bf16 781, tf32 361, fp32 51 TFLOP/s), peak memory (nvidia-smi, whole
process; PyTorch also max_memory_allocated), ratio to PyTorch in the same job and the target,
and the ratio to the reference PyTorch figure of docs/benchmarks.md (fixed: the same-job one moves with the host); then the 2-GPU
table: per-GPU steps/s, its share of our 1-GPU figure (GPU 0's; target 95%), its share of the
slower GPU's 1-GPU figure (DDP runs at the pace of the slower rank; GPUs of one host differ by up
to 2% under the power limit, results/h200x2/power/README.md; n/a without GPU 1's
file) and the median exposed communication per step from timing/exposed_comm. Missing files give
'n/a' cells.
"""
import argparse
import json
import os
import statistics

from .metrics import H200_CEILING_TFLOPS as CEILING_TFLOPS
from .reader import ResultsError, Run

TARGET = {"fp32": 1.1, "tf32": 2.5, "bf16": 5.0}
# PyTorch 1 x H200, no DDP, batch on the GPU, as docs/benchmarks.md gives it
# (eager PyTorch on the same machine type). PyTorch's tf32/bf16 step is bound by the host's kernel launches, so the same-job
# figure moves with the host (14-25 steps/s between jobs); this fixed reference is printed beside it.
ANCHOR_TORCH = {"fp32": 12.01, "tf32": 20.30, "bf16": 19.63}


def h5_summary(path):
    """summary/* scalars (images/s per rank recomputed: steps/s x batch x grad accumulation, and
    TFLOP/s from it) and the median exposed comm (ms, slowest rank) of the timed steps, or None
    when the file is missing or has no summary."""
    try:
        with Run(path) as run:
            s = {k: v for k, (v, _units) in run.summary_all().items()}
            s["images_per_second_per_rank"] = run.images_per_second() / run.world_size
            flops = run.attr("forward_flops_per_image", None)
            if flops is not None:
                s["tflops_per_rank"] = 3.0 * float(flops) * s["images_per_second_per_rank"] / 1e12
            exposed = run.step_series("timing/exposed_comm")[:, run.timed()]
            s["exposed_comm_ms"] = 1e3 * statistics.median(exposed.max(axis=0).tolist())
            return s
    except ResultsError:
        return None


def losses(path):
    """training/loss [ranks, steps] of `path`; ResultsError when missing."""
    with Run(path) as run:
        return run.step_series("training/loss")


def peak_gib(path):
    """The largest nvidia-smi memory.used sample of `path` in GiB (samples in MiB), or None."""
    try:
        v = [float(x) for x in open(path).read().split() if x.strip()]
        return max(v) / 1024 if v else None
    except OSError:
        return None


def fmt(x, spec=".2f"):
    """x formatted with `spec`, "n/a" for None."""
    return "n/a" if x is None else format(x, spec)


def main(argv=None, prog="vitddp-report speed"):
    """Prints the tables for the benchmark folder given in `argv`; returns 0."""
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir", metavar="OUTDIR", help="folder written by results/commands/speed.sh")
    out = ap.parse_args(argv).outdir
    if not os.path.isdir(out):
        raise ResultsError("%s: no such folder (give the folder results/commands/speed.sh wrote)" % out)
    print("## 1 x H200, ViT-L/32, batch 32, data on the GPU\n")
    print("| precision | run | steps/s | images/s | TFLOP/s | MFU | peak GiB (nvidia-smi) | vs PyTorch (target) "
          "| vs reference PyTorch (docs/benchmarks.md) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    one_gpu = {}
    slower_gpu = {}
    for p in ("fp32", "tf32", "bf16"):
        t = None
        try:
            t = json.load(open(os.path.join(out, f"torch-{p}.json")))
        except OSError:
            pass
        ts = t["steps_per_s"] if t else None
        for mode in ("graph", "eager", "graph-gpu1"):
            v = h5_summary(os.path.join(out, f"vitddp-{p}-{mode}.h5"))
            if mode == "graph-gpu1" and not v:
                continue
            sps = v["steps_per_second"] if v else None
            if mode == "graph":
                one_gpu[p] = sps
            if mode == "graph-gpu1" and one_gpu[p]:
                slower_gpu[p] = min(one_gpu[p], sps)
            tf = v["tflops_per_rank"] if v else None
            ratio = f"{sps / ts:.2f}x (>= {TARGET[p]}x)" if sps and ts else "n/a"
            anchor = f"{sps / ANCHOR_TORCH[p]:.2f}x ({ANCHOR_TORCH[p]})" if sps else "n/a"
            label = {"graph": "vitddp, CUDA graph", "eager": "vitddp, --cuda-graph off",
                     "graph-gpu1": "vitddp, CUDA graph, on GPU 1"}[mode]
            print(f"| {p} | {label} | {fmt(sps)} | {fmt(v and v['images_per_second_per_rank'], '.0f')} | {fmt(tf, '.1f')} | "
                  f"{fmt(tf and 100 * tf / CEILING_TFLOPS[p], '.1f')}% | {fmt(peak_gib(os.path.join(out, f'mem-vitddp-{p}-{mode}.txt')))} | {ratio} "
                  f"| {anchor} |")
        alloc = t["peak_mem_allocated_bytes"] / 2**30 if t else None
        print(f"| {p} | PyTorch {t['torch'] if t else ''} | {fmt(ts)} | {fmt(t and t['images_per_s'], '.0f')} | {fmt(t and t['tflops'], '.1f')} | "
              f"{fmt(t and 100 * t['tflops'] / CEILING_TFLOPS[p], '.1f')}% | {fmt(peak_gib(os.path.join(out, f'mem-torch-{p}.txt')))} "
              f"(allocated {fmt(alloc)}) | 1 | {fmt(ts and ts / ANCHOR_TORCH[p])}x |")
    print("\nLosses with and without the CUDA graph (same seed, same data; two processes, each autotuning its "
          "GEMM algorithms by timing, so a different choice changes the last bits; with a fixed choice they are "
          "bitwise equal: gpu_tests \"[graph]\"):\n")
    for p in ("fp32", "tf32", "bf16"):
        try:
            a = losses(os.path.join(out, f"vitddp-{p}-graph.h5"))
            b = losses(os.path.join(out, f"vitddp-{p}-eager.h5"))
            same = a.shape == b.shape and (a == b).all()
            diff = float(abs(a - b).max()) if a.shape == b.shape else float("nan")
            print(f"- {p}: {a.size} step losses, {'bitwise identical' if same else f'DIFFER (max |diff| {diff:.3g})'}")
        except ResultsError:
            print(f"- {p}: n/a")
    rows = []
    for p in ("fp32", "tf32", "bf16"):
        for c in ("none", "bf16"):
            for impl, suffix in (("nccl", ""), ("copy-engine", "-ce")):
                v = h5_summary(os.path.join(out, f"vitddp-{p}-np2-{c}{suffix}.h5"))
                if v:
                    rows.append((p, c, impl, v))
    if rows:
        print("\n## 2 x H200 over NVLink (per GPU), 25 MiB buckets, CUDA graph\n")
        print("| precision | compression | --allreduce | steps/s per GPU | share of our 1-GPU figure (target 95%) "
              "| share of the slower GPU's 1-GPU figure | median exposed comm per step (ms) |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        share = lambda x, base: f"{100 * x / base:.1f}%" if base else "n/a"
        for p, c, impl, v in rows:
            x = v["steps_per_second"]
            print(f"| {p} | {c} | {impl} | {x:.2f} | {share(x, one_gpu.get(p))} | {share(x, slower_gpu.get(p))} "
                  f"| {v['exposed_comm_ms']:.2f} |")
    return 0

