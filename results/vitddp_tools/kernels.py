"""`vitddp-report kernels`: where one training step's GPU time goes, kernel family by kernel family,
against floors, from the CSV Nsight Compute writes for the kernels of one timed step:

    ncu --profile-from-start off --clock-control none --csv \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
        vitddp --no-ddp --model vit_b_16 --precision bf16 --batch-size 32 --data device \
        --warmup-steps 3 --steps 1 --cuda-graph off --out step.h5 > step.csv
    vitddp-report kernels step.csv --gemm gemm-vit_b_16-b32.json --model vit_b_16 > kernels.md

(vitddp brackets exactly its timed steps with cudaProfilerStart/Stop, so --profile-from-start off
keeps one step's kernels; `results/commands/kernel-profile.sh` runs this per model). ncu runs the
kernels one at a time, so the sum is the step's kernel time without overlap or launch gaps.

Floors, per family (the "floor us" and "x floor" columns):
  - GEMMs (cuBLASLt kernels): with --gemm (the GEMM ceilings at the model's shapes that
    `results/peers/torch_peers.py --gemm-ceilings --json` measures), the encoder's linear layers at
    their measured ceilings: the sum of the file's forward / data-gradient / weight-gradient GEMM
    milliseconds times the number of blocks; with --floors P instead, docs/benchmarks.md's whole-step
    figure for ViT-L/32 batch 32 (6.3 ms bf16, 13 ms tf32, 72 ms fp32);
  - attention (cuDNN's or vitddp's), with --gemm: the larger of its DRAM-bytes floor (below) and its
    matrix products at the file's forward ceiling: per block and image 4 T^2 D FLOPs forward (Q K^T
    and P V) and 8 T^2 D backward (dV, dP, dQ, dK), T tokens, D the width;
  - every other family, when the CSV has dram__bytes_read/_write: its DRAM bytes at the
    device-to-device copy bandwidth (--hbm-gbps, 4300 GB/s measured on an H200 by a large
    cudaMemcpy: read + write).
A family's "x floor" is its time over its floor; the step's floor is the sum of the floors. Then
the --top slowest kernels.
Exit 2 with one line on a missing or unreadable file or a ceilings file of another model, batch or
precision.
"""
import argparse
import csv
import json
import lzma
import math
import re
import sys

from .predict_model import VIT_CONFIGS

GEMM_FLOOR_MS = {"bf16": 6.3, "tf32": 13.0, "fp32": 72.0}  # docs/benchmarks.md, ViT-L/32 batch 32, one H200

# (family, pattern on the demangled kernel name), first match wins.
FAMILIES = [
    ("NCCL", r"nccl"),
    ("GEMM (cuBLASLt)", r"nvjet|xmma_gemm|sgemm|gemm|splitKreduce|cutlass"),
    ("GEMM bias gradient (cuBLASLt epilogue)", r"globalKernelBgrad"),
    ("attention backward (cuDNN)", r"sdpa.*bprop|compute_dot_do_o|convert_dq"),
    ("attention forward (cuDNN)", r"sdpa.*fprop"),
    ("attention backward (vitddp)", r"attn.*bwd|attention.*backward|attention_bwd"),
    ("attention forward (vitddp)", r"attn.*fwd|attention.*forward|attention_fwd"),
    # --attention gemm: its products are cuBLAS GEMMs (counted above), these its row kernels.
    ("attention softmax (vitddp, batched GEMMs)", r"softmax_rows|softmax_backward_rows|fill_pointers"),
    ("GELU backward + bias gradient", r"gelu_backward_bias"),
    ("GELU forward", r"gelu_forward|gelu_kernel"),
    ("LayerNorm backward", r"ln_warp::backward|layernorm.*backward|ln_param_grad|ln_backward"),
    ("LayerNorm forward", r"ln_warp::forward|layernorm.*forward|ln_forward"),
    ("column sums (bias gradients)", r"column_|colsum"),
    ("optimizer (SGD / AdamW, bf16 copy)", r"sgd_kernel|adamw"),
    ("non-finite check", r"nonfinite"),
    ("loss", r"xent"),
    ("patch embedding / tokens", r"im2col|assemble|patch"),
    ("casts", r"convert|cast"),
    ("memset / copy", r"memset|memcpy|fill"),
]


def family(name):
    for fam, pat in FAMILIES:
        if re.search(pat, name):
            return fam
    return "other"


def read_ncu(path):
    """{kernel launch ID: {"name", "ns", "bytes"}} from an ncu --csv file (or its .xz; the lines that are not
    CSV, such as the program's own output, are skipped). Raises ValueError when no metric is in it."""
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        lines = [ln for ln in f if ln.startswith('"')]
    rows = list(csv.reader(lines))
    if not rows or "Metric Name" not in rows[0]:
        raise ValueError(f"{path}: no ncu --csv metrics in it")
    h = {k: i for i, k in enumerate(rows[0])}
    kernels = {}
    for line, r in enumerate(rows[1:], start=2):
        if len(r) != len(rows[0]):
            raise ValueError(f"{path}: CSV row {line} has {len(r)} fields, the header {len(rows[0])} (truncated?)")
        k = kernels.setdefault(r[h["ID"]], {"name": r[h["Kernel Name"]], "ns": 0.0, "bytes": 0.0})
        try:
            value = float(r[h["Metric Value"]].replace(",", ""))
        except ValueError:
            raise ValueError(f"{path}: CSV row {line}: metric value '{r[h['Metric Value']]}' is not a number")
        if not value >= 0:
            raise ValueError(f"{path}: CSV row {line}: {r[h['Metric Name']]} = {value} (must be >= 0)")
        metric = r[h["Metric Name"]]
        if metric == "gpu__time_duration.sum":
            k["ns"] += value * {"ns": 1, "nsecond": 1, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6, "second": 1e9}.get(
                r[h["Metric Unit"]], 1)
        elif metric.startswith("dram__bytes"):
            k["bytes"] += value * {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9}.get(r[h["Metric Unit"]], 1)
    return kernels


def _ceilings(gemm_json, model, precision, batch=None):
    """The `precision` entry of a GEMM ceilings file, checked against the model (and batch) it
    must describe. ValueError naming the file otherwise."""
    try:
        with open(gemm_json) as f:
            d = json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{gemm_json}: not JSON ({e})")
    if not isinstance(d, dict) or not isinstance(d.get("ceilings"), dict):
        raise ValueError(f"{gemm_json}: no 'ceilings' object (torch_peers.py --gemm-ceilings --json writes one)")
    if d.get("model", model) != model:
        raise ValueError(f"{gemm_json}: ceilings of {d['model']}, not of --model {model}")
    if batch is not None and d.get("batch_size", batch) != batch:
        raise ValueError(f"{gemm_json}: ceilings at batch {d['batch_size']}, not at --batch-size {batch}")
    if precision not in d["ceilings"]:
        raise ValueError(f"{gemm_json}: no {precision} ceilings (it has {', '.join(d['ceilings']) or 'none'})")
    return d["ceilings"][precision]


def gemm_floor_us(gemm_json, model, precision, batch=None):
    """Microseconds of the encoder's GEMMs at the measured ceilings (see the module text)."""
    probe = _ceilings(gemm_json, model, precision, batch)
    layers = VIT_CONFIGS[model][2]
    return 1e3 * layers * sum(g["ms"] for g in probe["gemms"])


def attention_floor_us(gemm_json, model, precision, batch, backward):
    """Microseconds of the attention core's matrix products at the forward GEMM ceiling."""
    image, patch, layers, _, hidden = VIT_CONFIGS[model][:5]
    tokens = (image // patch) ** 2 + 1
    ceiling = _ceilings(gemm_json, model, precision, batch)["forward_tflops"]
    flops = (8 if backward else 4) * tokens ** 2 * hidden * batch * layers
    return flops / (ceiling * 1e6)


def table(kernels, gemm_us=None, hbm_gbps=4300.0, attention_us=None):
    """Rows (family, launches, us, share, MB, floor_us, x_floor) sorted by time, and the totals.
    attention_us: {"forward": us, "backward": us} FLOP floors of the attention families (or None)."""
    fams = {}
    for k in kernels.values():
        f = fams.setdefault(family(k["name"]), {"n": 0, "ns": 0.0, "bytes": 0.0})
        f["n"] += 1
        f["ns"] += k["ns"]
        f["bytes"] += k["bytes"]
    total_us = sum(f["ns"] for f in fams.values()) / 1e3
    rows = []
    for name, f in sorted(fams.items(), key=lambda kv: -kv[1]["ns"]):
        us = f["ns"] / 1e3
        if name == "GEMM (cuBLASLt)":
            floor = gemm_us
        else:
            floor = f["bytes"] / (hbm_gbps * 1e3) if f["bytes"] > 0 else None  # bytes / (GB/s) -> us
            if attention_us and name.startswith("attention"):
                floor = max(floor or 0.0, attention_us["backward" if "backward" in name else "forward"])
        rows.append((name, f["n"], us, us / total_us if total_us else 0.0, f["bytes"] / 1e6, floor,
                     us / floor if floor else None))
    return rows, total_us


def top_kernels(kernels, n):
    """The `n` kernels (by name without arguments) with the most time: (name, launches, us)."""
    per = {}
    for k in kernels.values():
        e = per.setdefault(k["name"].split("(")[0][:90], [0, 0.0])
        e[0] += 1
        e[1] += k["ns"] / 1e3
    return sorted(((name, c, us) for name, (c, us) in per.items()), key=lambda r: -r[2])[:n]


def render(rows, total_us, title):
    out = [f"### {title}", "",
           "| kernel family | launches | us | share | DRAM MB | floor us | x floor |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    floor_sum = 0.0
    for name, n, us, share, mb, floor, x in rows:
        floor_sum += floor or 0.0
        out.append(f"| {name} | {n} | {us:.1f} | {100 * share:.1f}% | {mb:.1f} | "
                   f"{'-' if floor is None else f'{floor:.1f}'} | {'-' if x is None else f'{x:.2f}'} |")
    out.append(f"| **step** | {sum(r[1] for r in rows)} | {total_us:.1f} | 100% | "
               f"{sum(r[4] for r in rows):.1f} | {floor_sum:.1f} | {total_us / floor_sum:.2f} |" if floor_sum else
               f"| **step** | {sum(r[1] for r in rows)} | {total_us:.1f} | 100% | - | - | - |")
    return "\n".join(out) + "\n"


def main(argv=None, prog="vitddp-report kernels"):
    """Prints the tables of the ncu CSV in `argv`; returns 0, or 2 on bad input (one line)."""
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="ncu --csv output (or .csv.xz)")
    ap.add_argument("--gemm", help="GEMM ceilings JSON (torch_peers.py --gemm-ceilings --json)")
    ap.add_argument("--floors", choices=sorted(GEMM_FLOOR_MS),
                    help="without --gemm: docs/benchmarks.md's ViT-L/32 GEMM floor of this precision")
    ap.add_argument("--model", default="vit_l_32", choices=sorted(VIT_CONFIGS))
    ap.add_argument("--precision", default="bf16", choices=sorted(GEMM_FLOOR_MS))
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--hbm-gbps", type=float, default=4300.0)
    ap.add_argument("--top", type=int, default=12, help="also list the N slowest kernels [12]")
    ap.add_argument("--title", default=None)
    a = ap.parse_args(argv)
    if a.batch_size < 1:
        ap.error(f"--batch-size must be >= 1, got {a.batch_size}")
    if not (a.hbm_gbps > 0 and math.isfinite(a.hbm_gbps)):
        ap.error(f"--hbm-gbps must be a positive number, got {a.hbm_gbps}")
    try:
        kernels = read_ncu(a.csv)
        if not any(k["ns"] > 0 for k in kernels.values()):
            raise ValueError(f"{a.csv}: no gpu__time_duration.sum rows")
        gemm_us = gemm_floor_us(a.gemm, a.model, a.precision, a.batch_size) if a.gemm else None
        if gemm_us is None and a.floors:
            gemm_us = 1e3 * GEMM_FLOOR_MS[a.floors]
        attention_us = {d: attention_floor_us(a.gemm, a.model, a.precision, a.batch_size, d == "backward")
                        for d in ("forward", "backward")} if a.gemm else None
    except OSError as e:
        print(f"{prog}: {e.filename or a.csv}: {e.strerror or e}", file=sys.stderr)
        return 2
    except (ValueError, KeyError, TypeError, EOFError, lzma.LZMAError, UnicodeDecodeError) as e:
        where = a.csv if not a.gemm else a.csv + " or " + a.gemm
        print(f"{prog}: {e}" if isinstance(e, ValueError) else f"{prog}: {where}: unreadable ({e!r})", file=sys.stderr)
        return 2
    rows, total = table(kernels, gemm_us, a.hbm_gbps, attention_us)
    print(render(rows, total, a.title or f"{a.model} {a.precision}: one training step"))
    if a.top > 0:
        print(f"The {a.top} kernels with the most time:\n")
        print("| kernel | launches | us | mean us |")
        print("| --- | ---: | ---: | ---: |")
        for name, n, us in top_kernels(kernels, a.top):
            print(f"| `{name}` | {n} | {us:.1f} | {us / n:.1f} |")
        print()  # tables of several steps printed one after the other stay apart
    return 0
