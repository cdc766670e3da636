"""`vitddp-report kernels`: per-kernel time table of one training step from an Nsight Compute CSV.

    ncu --nvtx --nvtx-include "Batch 3/" --metrics gpu__time_duration.sum --csv vitddp ... > k.csv
    vitddp-report kernels k.csv --floors bf16 > kernels.md

Reads ncu's --csv output (one row per kernel launch and metric), sums gpu__time_duration per
kernel family (GEMMs by cuBLASLt, our attention/LayerNorm/GELU/loss/patch/optimizer kernels,
NCCL), and prints a markdown table: family, launches, total ms, share of the step, and the floor
from docs/benchmarks.md where one exists (GEMMs: 6.3 ms bf16, 13 ms tf32, 72 ms fp32 on one
H200; SGD update: 0.9 ms). ncu serialises kernels, so the sum is the step's kernel time without
overlap or launch gaps: compare it with the step time in the results file to see the gaps.
Exit 2 when the file has no kernel rows.
"""
import argparse
import collections
import csv
import sys

GEMM_FLOOR_MS = {"bf16": 6.3, "tf32": 13.0, "fp32": 72.0}
FAMILIES = [  # (family, substrings of the kernel name), first match wins
    ("GEMM (cuBLASLt)", ("gemm", "nvjet", "sm90_xmma", "cutlass", "xmma")),
    ("NCCL", ("nccl",)),
    ("attention", ("attention", "attn", "sdpa", "flash", "fmha")),
    ("LayerNorm", ("layernorm", "ln_")),
    ("GELU", ("gelu",)),
    ("softmax + cross-entropy", ("xent", "softmax")),
    ("patch embedding / tokens", ("im2col", "assemble", "token", "patch")),
    ("SGD / AdamW update", ("sgd", "adam")),
    ("non-finite check", ("nonfinite",)),
    ("bf16 casts", ("bf16", "convert", "cast")),
    ("column sums / reductions", ("column", "reduce", "sum")),
    ("memset / copy", ("memset", "memcpy", "fill")),
]


def family(name):
    """The kernel family (FAMILIES) of kernel `name`, "other" when none matches."""
    low = name.lower()
    for fam, keys in FAMILIES:
        if any(k in low for k in keys):
            return fam
    return "other"


def main(argv=None, prog="vitddp-report kernels"):
    """Prints the tables of the ncu CSV in `argv`; returns 0, or 2 when it has no kernel rows."""
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="ncu --csv output")
    ap.add_argument("--floors", choices=sorted(GEMM_FLOOR_MS), help="precision whose GEMM floor to show")
    ap.add_argument("--top", type=int, default=12, help="also list the N slowest kernels [12]")
    a = ap.parse_args(argv)
    rows = []
    with open(a.csv, newline="") as f:
        lines = [l for l in f if l.startswith('"')]  # ncu prints its own log lines before the CSV
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        v = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "nsecond")
        scale = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3}.get(unit, 1e-6)
        rows.append((r["Kernel Name"], v * scale))
    if not rows:
        print(f"{a.csv}: no gpu__time_duration.sum rows", file=sys.stderr)
        return 2
    total = sum(ms for _, ms in rows)
    fam = collections.defaultdict(lambda: [0, 0.0])
    per_kernel = collections.defaultdict(lambda: [0, 0.0])
    for name, ms in rows:
        fam[family(name)][0] += 1
        fam[family(name)][1] += ms
        short = name.split("(")[0][:90]
        per_kernel[short][0] += 1
        per_kernel[short][1] += ms
    floors = {}
    if a.floors:
        floors["GEMM (cuBLASLt)"] = GEMM_FLOOR_MS[a.floors]
        floors["SGD / AdamW update"] = 0.9
    print(f"Kernels of one step: {len(rows)} launches, {total:.2f} ms of kernel time (serialised by ncu)\n")
    print("| family | launches | ms | share | floor (docs/benchmarks.md) |")
    print("| --- | --- | --- | --- | --- |")
    for k, (n, ms) in sorted(fam.items(), key=lambda kv: -kv[1][1]):
        fl = f"{floors[k]:.1f} ms" if k in floors else ""
        print(f"| {k} | {n} | {ms:.3f} | {100 * ms / total:.1f}% | {fl} |")
    print(f"\nThe {a.top} kernels with the most time:\n")
    print("| kernel | launches | ms | mean us |")
    print("| --- | --- | --- | --- |")
    for k, (n, ms) in sorted(per_kernel.items(), key=lambda kv: -kv[1][1])[: a.top]:
        print(f"| `{k}` | {n} | {ms:.3f} | {1e3 * ms / n:.1f} |")
    return 0

