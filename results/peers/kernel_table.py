"""Where one vitddp training step's GPU time goes, kernel family by kernel family, against floors.

Input: the CSV that Nsight Compute writes for the kernels of one timed step, e.g.

    ncu --profile-from-start off --clock-control none --csv \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
        vitddp --no-ddp --model vit_b_16 --precision bf16 --batch-size 32 --data device \
        --warmup-steps 3 --steps 1 --cuda-graph off --out step.h5 > step.csv

(vitddp brackets exactly its timed steps with cudaProfilerStart/Stop, so --profile-from-start off
keeps one step's kernels), and optionally the GEMM ceilings at the model's shapes
(`torch_peers.py --gemm-ceilings --json`, bench_peers.sh's gemm-<model>-b<batch>.json).

Floors, per family:
  - GEMMs (cuBLASLt kernels): the encoder's linear layers at their measured ceilings, i.e. the sum
    over the ceilings file's forward / data-gradient / weight-gradient GEMMs of their measured
    milliseconds (torch.matmul at the same M x K x N and precision), times the number of blocks;
  - attention (cuDNN's or vitddp's): the larger of its DRAM-bytes floor (below) and its matrix
    products at the GEMM ceilings file's forward ceiling: per block and image 4 T^2 D FLOPs forward
    (Q K^T and P V) and 8 T^2 D backward (dV, dP, dQ, dK), T tokens, D the width;
  - every other family: its DRAM bytes (read + write, as ncu counts them) at the device-to-device
    copy bandwidth (--hbm-gbps, 4300 GB/s measured on an H200 by a large cudaMemcpy: read + write).
A family's "x floor" is its time over its floor; the step's floor is the sum of the floors.

Usage: kernel_table.py STEP.csv [--gemm GEMM.json] [--model vit_b_16] [--precision bf16]
       [--batch-size 32] [--hbm-gbps 4300]
Prints a Markdown table. Exit 2 with one line on a missing or unreadable file.
"""
import argparse
import csv
import json
import lzma
import math
import re
import sys

import vit_shapes

# (family, pattern on the demangled kernel name), first match wins.
FAMILIES = [
    ("GEMM (cuBLASLt)", r"nvjet|xmma_gemm|sgemm|gemm|splitKreduce|cutlass"),
    ("GEMM bias gradient (cuBLASLt epilogue)", r"globalKernelBgrad"),
    ("attention backward (cuDNN)", r"sdpa.*bprop|compute_dot_do_o|convert_dq"),
    ("attention forward (cuDNN)", r"sdpa.*fprop"),
    ("attention backward (vitddp)", r"attn.*bwd|attention.*backward|attention_bwd"),
    ("attention forward (vitddp)", r"attn.*fwd|attention.*forward|attention_fwd"),
    ("GELU backward + bias gradient", r"gelu_backward_bias"),
    ("GELU forward", r"gelu_forward|gelu_kernel"),
    ("LayerNorm backward", r"ln_warp::backward|layernorm.*backward|ln_param_grad"),
    ("LayerNorm forward", r"ln_warp::forward|layernorm.*forward"),
    ("column sums (bias gradients)", r"column_|colsum"),
    ("optimizer (SGD / AdamW, bf16 copy)", r"sgd_kernel|adamw"),
    ("non-finite check", r"nonfinite"),
    ("loss", r"xent"),
    ("patch embedding / tokens", r"im2col|assemble|patch"),
    ("casts", r"convert|cast"),
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
            k["ns"] += value * {"ns": 1, "us": 1e3, "usecond": 1e3, "msecond": 1e6, "ms": 1e6}.get(
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
    layers = vit_shapes.SIZES[model].layers
    return 1e3 * layers * sum(g["ms"] for g in probe["gemms"])


def attention_floor_us(gemm_json, model, precision, batch, backward):
    """Microseconds of the attention core's matrix products at the forward GEMM ceiling."""
    size = vit_shapes.SIZES[model]
    ceiling = _ceilings(gemm_json, model, precision, batch)["forward_tflops"]
    flops = (8 if backward else 4) * size.seq_len ** 2 * size.hidden * batch * size.layers
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
            floor = f["bytes"] / (hbm_gbps * 1e3)  # bytes / (GB/s) -> us
            if attention_us and name.startswith("attention"):
                floor = max(floor, attention_us["backward" if "backward" in name else "forward"])
        rows.append((name, f["n"], us, us / total_us if total_us else 0.0, f["bytes"] / 1e6, floor,
                     us / floor if floor else None))
    return rows, total_us


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


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--gemm", help="GEMM ceilings JSON (torch_peers.py --gemm-ceilings)")
    ap.add_argument("--model", default="vit_l_32", choices=vit_shapes.MODEL_NAMES)
    ap.add_argument("--precision", default="bf16", choices=vit_shapes.PRECISIONS)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--hbm-gbps", type=float, default=4300.0)
    ap.add_argument("--title", default=None)
    a = ap.parse_args(argv)
    if a.batch_size < 1:
        ap.error(f"--batch-size must be >= 1, got {a.batch_size}")
    if not (a.hbm_gbps > 0 and math.isfinite(a.hbm_gbps)):
        ap.error(f"--hbm-gbps must be a positive number, got {a.hbm_gbps}")
    try:
        kernels = read_ncu(a.csv)
        gemm_us = gemm_floor_us(a.gemm, a.model, a.precision, a.batch_size) if a.gemm else None
        attention_us = {d: attention_floor_us(a.gemm, a.model, a.precision, a.batch_size, d == "backward")
                        for d in ("forward", "backward")} if a.gemm else None
    except OSError as e:
        print(f"kernel_table.py: {e.filename or a.csv}: {e.strerror or e}", file=sys.stderr)
        return 2
    except (ValueError, KeyError, TypeError, EOFError, lzma.LZMAError, UnicodeDecodeError) as e:
        where = a.csv if not a.gemm else a.csv + " or " + a.gemm
        print(f"kernel_table.py: {e}" if isinstance(e, ValueError) else f"kernel_table.py: {where}: unreadable ({e!r})",
              file=sys.stderr)
        return 2
    rows, total = table(kernels, gemm_us, a.hbm_gbps, attention_us)
    print(render(rows, total, a.title or f"{a.model} {a.precision}: one training step"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
