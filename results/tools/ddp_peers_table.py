#!/usr/bin/env python3
"""vitddp's runs beside PyTorch's data-parallel peers of the same job: one Markdown table per precision.

    python3 results/tools/ddp_peers_table.py DIR [--baseline REGEX] [-o FILE.md]

Reads, in DIR itself (results/commands/zero.sh writes them there):
  - vitddp results files: `*.h5` and the members of `h5.tar.xz` (docs/schema.md: root attributes
    `world_size`, `precision`, `optimizer`, `collectives`, `option.allreduce`, `option.compression`;
    `summary/steps_per_second`);
  - PyTorch results: `*.json` objects with the keys `world_size`, `precision` and `steps_per_s`, as
    results/bench_torch_ddp.py writes them (`mode`, `strategy`, `compile`, `optimizer` describe
    the configuration; `optimizer` is absent, i.e. SGD, in files of older versions);
  - PyTorch runs that did not finish: `NAME.failed`, one line `RANKS PRECISION REASON...`.

Per precision, one row per run (the file name without its suffix), vitddp's first:
  GPUs          world_size
  what          vitddp: `collectives` (all-reduce, ZeRO-1's reduce-scatter and all-gather and its
                dtype), `--allreduce` and `--compression` when not the defaults; PyTorch: `mode`
                (DDP where the file has none and world_size > 1, eager for 1 GPU)
  optimizer     `optimizer` (sgd, adamw)
  steps/s per GPU
  share of 1 GPU  steps/s over the same tool's 1-GPU run of the same precision in DIR: for vitddp
                the first 1-rank file (sorted by name) whose name matches --baseline (default: any);
                for PyTorch the 1-GPU run with the same `compile` mode (eager against eager,
                compiled against compiled; empty when that one failed)
  vs best PyTorch  a vitddp row's steps/s over the fastest PyTorch run of the same precision, GPU
                count and optimizer (the lines under the table name them; empty when there is none)
A table whose rows do not all share one optimizer says so under it.

Exit 0; 2 when DIR is not a folder or holds none of these files.
"""
import argparse
import json
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from topic_readme import collect, text  # noqa: E402  (the archive handling of the README's runs table)

PRECISION_ORDER = {"fp32": 0, "tf32": 1, "bf16": 2}


def vitddp_row(path):
    """The row of one vitddp results file, or None when it is not one."""
    import h5py
    try:
        with h5py.File(path, "r") as f:
            a = f.attrs
            if text(a.get("program", "")) != "vitddp":
                return None
            ranks = int(a.get("world_size", 1))
            what = [text(a.get("collectives", "all-reduce" if ranks > 1 else "none (no DDP)"))]
            allreduce = text(a.get("option.allreduce", "nccl"))
            compression = text(a.get("option.compression", "none"))
            if ranks > 1 and allreduce != "nccl":
                what.append(f"--allreduce {allreduce}")
            if compression != "none":
                what.append(f"--compression {compression}")
            return {"tool": "vitddp", "ranks": ranks, "precision": text(a.get("precision", "fp32")),
                    "what": ", ".join(what), "optimizer": text(a.get("optimizer", "sgd")),
                    "sps": float(f["summary/steps_per_second"][()]), "compile": None, "failed": None}
    except (OSError, KeyError, ValueError, TypeError):
        return None


def torch_row(path):
    """The row of one PyTorch JSON file, or None when it is not one."""
    try:
        with open(path, encoding="utf-8") as fh:
            d = json.load(fh)
        if not isinstance(d, dict) or not all(k in d for k in ("world_size", "precision", "steps_per_s")):
            return None
        ranks = int(d["world_size"])
        return {"tool": "PyTorch", "ranks": ranks, "precision": str(d["precision"]),
                "what": str(d.get("mode") or ("DDP" if ranks > 1 else "eager")),
                "optimizer": str(d.get("optimizer", "sgd")), "sps": float(d["steps_per_s"]),
                "compile": str(d.get("compile", "none")), "failed": None}
    except (OSError, ValueError, TypeError):
        return None


def failed_row(path):
    """The row of a `.failed` note (`RANKS PRECISION REASON...`), or None when it is not one."""
    try:
        parts = open(path, encoding="utf-8").readline().split(None, 2)
        return {"tool": "PyTorch", "ranks": int(parts[0]), "precision": parts[1],
                "what": "", "optimizer": "", "sps": None, "compile": None,
                "failed": parts[2].strip() if len(parts) > 2 else "failed"}
    except (OSError, ValueError, IndexError):
        return None


def gather(folder):
    """[(name, row)] of every run in `folder` (vitddp files unpacked from h5.tar.xz as needed)."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for group, path in collect(folder, tmp):
            r = vitddp_row(path) if group == "." else None
            if r:
                rows.append((os.path.basename(path)[:-3], r))
    for fn in sorted(os.listdir(folder)):
        path = os.path.join(folder, fn)
        r = torch_row(path) if fn.endswith(".json") else failed_row(path) if fn.endswith(".failed") else None
        if r:
            rows.append((fn.rsplit(".", 1)[0], r))
    return rows


def shares(mine, baseline):
    """{name: share of 1 GPU} of one precision's rows (see the module doc)."""
    base_v = next((r["sps"] for n, r in mine if r["tool"] == "vitddp" and r["ranks"] == 1
                   and re.search(baseline, n)), None)
    base_t = {}
    for n, r in mine:
        if r["tool"] == "PyTorch" and r["ranks"] == 1 and r["sps"] is not None:
            base_t.setdefault(r["compile"], r["sps"])
    out = {}
    for n, r in mine:
        b = base_v if r["tool"] == "vitddp" else base_t.get(r["compile"])
        if r["sps"] is not None and b:
            out[n] = r["sps"] / b
    return out


def render(rows, baseline=""):
    """Markdown: one table per precision."""
    out = []
    precisions = sorted({r["precision"] for _, r in rows}, key=lambda p: (PRECISION_ORDER.get(p, 9), p))
    for p in precisions:
        mine = sorted([(n, r) for n, r in rows if r["precision"] == p],
                      key=lambda t: (t[1]["tool"] != "vitddp", t[1]["failed"] is not None, t[1]["ranks"], t[0]))
        share = shares(mine, baseline)
        best = {}  # (GPUs, optimizer) -> (steps/s, name) of the fastest PyTorch run
        for n, r in mine:
            k = (r["ranks"], r["optimizer"])
            if r["tool"] == "PyTorch" and r["sps"] is not None and r["sps"] > best.get(k, (0, ""))[0]:
                best[k] = (r["sps"], n)
        out.append(f"### {p}\n")
        out.append("| run | tool | GPUs | what | optimizer | steps/s per GPU | share of 1 GPU | vs best PyTorch |")
        out.append("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for n, r in mine:
            sps = f"failed: {r['failed']}" if r["failed"] else f"{r['sps']:.2f}"
            sh = f"{100 * share[n]:.1f}%" if n in share else ""
            vs = ""
            k = (r["ranks"], r["optimizer"])
            if r["tool"] == "vitddp" and k in best:
                vs = f"{r['sps'] / best[k][0]:.2f}x"
            out.append(f"| {n} | {r['tool']} | {r['ranks']} | {r['what']} | {r['optimizer']} | {sps} | {sh} | {vs} |")
        out.append("")
        for g, o in sorted(best):
            sps, name = best[g, o]
            out.append(f"Best PyTorch run on {g} GPU{'s' if g > 1 else ''} with {o}: `{name}` "
                       f"({dict(mine)[name]['what']}, {sps:.2f} steps/s per GPU).")
        if not best:
            out.append("No PyTorch run finished in this precision.")
        opts = sorted({r["optimizer"] for _, r in mine if r["optimizer"]})
        if len(opts) > 1:
            out.append(f"Not one optimizer: the rows use {', '.join(opts)}; compare rows of the same optimizer only.")
        out.append("")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", metavar="DIR")
    ap.add_argument("--baseline", default="", metavar="REGEX", help="vitddp's 1-rank files eligible as its 1-GPU figure")
    ap.add_argument("-o", "--output", help="write here instead of stdout")
    a = ap.parse_args(argv)
    if not os.path.isdir(a.dir):
        print(f"ddp_peers_table.py: {a.dir}: no such folder", file=sys.stderr)
        return 2
    rows = gather(a.dir)
    if not rows:
        print(f"ddp_peers_table.py: {a.dir}: no vitddp results file and no PyTorch result", file=sys.stderr)
        return 2
    doc = render(rows, a.baseline)
    if a.output:
        with open(a.output, "w", encoding="utf-8") as f:
            f.write(doc)
    else:
        sys.stdout.write(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
