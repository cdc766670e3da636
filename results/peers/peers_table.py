#!/usr/bin/env python3
"""Markdown table of vitddp against its peers (torch_peers.py, jax_vit.py), one section per
(model, batch, precision):

    python3 results/peers/peers_table.py OUT [OUT2 ...] > peers_table.md

Reads, in each folder (results/commands/bench_peers.sh writes them):
  *.h5        vitddp results files (results/SCHEMA.md): attributes model, batch_size, precision,
              attention, recompute_gelu, option.cuda-graph; summary/steps_per_second, images_per_second_per_rank,
              median_step_time. A file without summary/steps_per_second is an incomplete run. A kept
              folder may pack them into h5.tar.xz (results/commands/lib.sh's pack): its members are
              read the same way, under their own names.
  *.json      the peers' results ("kind": "peer") and torch_peers.py --gemm-ceilings results
              ("kind": "gemm_ceilings", matched by model and batch); other JSON is ignored.
  mem-NAME.txt  nvidia-smi memory.used samples (MiB, one a line) taken while the run whose file is
              NAME.h5 / NAME.json ran: its peak is the "smi GiB" column (or the same member of
              mem.tar.xz, where a kept folder packs them).
  runs.tsv    bench_peers.sh's list of runs (round, tool, mode, model, batch, precision, exit
              status, seconds, file): runs with a non-zero exit are listed under the section.

Columns: steps/s is the best round's timed steps / host wall time of its timed window (vitddp's
summary/steps_per_second and the peers' steps_per_s: the same definition); images/s = steps/s x
batch; TFLOP/s = 3 x forward FLOPs per image x images/s with vitddp's formula
(vit_shapes.forward_flops_per_image) for every row alike; MFU = TFLOP/s / the FLOP-weighted GEMM
ceiling of that precision at the model's linear shapes (train_tflops of --gemm-ceilings: forward,
data- and weight-gradient GEMMs of QKV, out-projection, MLP up and down; "-" without a ceilings
file); median step ms: CUDA events (vitddp, torch) or per-step block_until_ready (jax);
alloc/reserved GiB: the peer's own allocator peaks (torch.cuda.max_memory_allocated/_reserved, XLA's
peak_bytes_in_use/pool), the largest over rounds; smi GiB: nvidia-smi's peak memory.used (all
processes on the GPU); compile s: first step (torch) or jit compile (jax), the largest over rounds
(cold caches); loss first -> last: the best round's first and last training loss (vitddp:
rank 0's training/loss; a peer whose loss does not move did not train); rounds: every round's
steps/s. The last line of a section: vitddp's steps/s over the
best peer's (> 1: vitddp is faster).
"""
import argparse
import csv
import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vit_shapes  # noqa: E402

GIB = 1024.0 ** 3


def smi_peak_gib(result_path):
    """Peak of mem-NAME.txt beside `result_path` (NAME = its file name without the extension), or
    of that member of mem.tar.xz beside it (how a kept folder packs them), in GiB (nvidia-smi
    reports MiB); None when there is no such file or it holds no number."""
    import tarfile
    stem = os.path.splitext(os.path.basename(result_path))[0]
    folder, name = os.path.dirname(result_path), f"mem-{stem}.txt"
    path, packed = os.path.join(folder, name), os.path.join(folder, "mem.tar.xz")
    lines = []
    if os.path.exists(path):
        with open(path) as f:
            lines = f.read().splitlines()
    elif os.path.exists(packed):
        with tarfile.open(packed) as t:
            member = next((m for m in t.getmembers() if m.isfile() and os.path.basename(m.name) == name), None)
            if member is not None:
                lines = t.extractfile(member).read().decode(errors="replace").splitlines()
    values = []
    for line in lines:
        try:
            values.append(float(line.strip()))
        except ValueError:
            pass
    return max(values) / 1024.0 if values else None


def read_vitddp(path, source=None):
    """One row from a vitddp results file, or None when it is not vitddp's or has no summary.
    `source`: the file's bytes as a file object (a member of h5.tar.xz), `path` then only names it."""
    import h5py
    with h5py.File(source if source is not None else path, "r") as f:
        a = f.attrs
        if "summary/steps_per_second" not in f or "model" not in a:
            return {"incomplete": True, "file": path, "reason": str(a.get("stop_reason", "no summary"))}

        def attr(name, default=""):
            v = a.get(name, default)
            return v.decode() if isinstance(v, bytes) else v
        graph = attr("option.cuda-graph", "on")
        mode = f"cuda graph {graph}, {attr('attention', '?')} attention"
        if attr("recompute_gelu") == "on":  # absent in files written before the option existed
            mode += ", GELU recomputed"
        if attr("option.optimizer-in-backward") == "true":  # absent before the option existed
            mode += ", SGD in backward"
        tf32x3 = attr("option.fp32-matmul") == "tf32x3"  # absent before the option existed
        if tf32x3:
            mode += ", 3xTF32 GEMMs"
        names = a.get("device_names")
        device = names[0] if names is not None and len(names) else None
        device = device.decode() if isinstance(device, bytes) else device
        return {"tool": "vitddp", "mode": mode, "fp32_matmul": "tf32x3" if tf32x3 else "ieee",
                "model": attr("model"), "batch_size": int(a["batch_size"]),
                "precision": attr("precision"), "steps_per_s": float(f["summary/steps_per_second"][()]),
                "median_step_ms": float(f["summary/median_step_time"][()]) * 1e3 if "summary/median_step_time" in f else None,
                "alloc": None, "reserved": None, "compile_s": None, "device_name": device, "file": path,
                "loss": (float(f["training/loss"][0, 0]), float(f["training/loss"][0, -1]))
                if "training/loss" in f and f["training/loss"].shape[1] else None}


def read_peer(path, r):
    """One row from a peer's JSON result `r`."""
    mode = r["mode"]
    if r["tool"] == "jax":
        mode = f"jit, {r.get('attention', '?')} attention"
        if r.get("fp32_matmul") == "tf32x3":
            mode += ", TF32_TF32_F32_X3 dots"
    elif r.get("optimizer_step") == "compiled":
        mode += ", compiled SGD"

    def gib(v):
        return v / GIB if v is not None else None
    return {"tool": r["tool"], "mode": mode, "fp32_matmul": r.get("fp32_matmul", "ieee"),
            "model": r["model"], "batch_size": int(r["batch_size"]),
            "precision": r["precision"], "steps_per_s": float(r["steps_per_s"]),
            "median_step_ms": r.get("median_step_ms"), "alloc": gib(r.get("peak_mem_allocated_bytes")),
            "reserved": gib(r.get("peak_mem_reserved_bytes")), "compile_s": r.get("compile_s"),
            "device_name": r.get("device_name"), "file": path,
            "loss": (r["loss_first"], r["loss_last"]) if r.get("loss_first") is not None else None}


def vitddp_files(folder):
    """(path, None) for each *.h5 of `folder`, then (folder/NAME, the member's bytes) for each
    member NAME.h5 of folder/h5.tar.xz, in name order."""
    import io
    import tarfile
    out = [(p, None) for p in sorted(glob.glob(os.path.join(folder, "*.h5")))]
    packed = os.path.join(folder, "h5.tar.xz")
    if os.path.exists(packed):
        with tarfile.open(packed) as t:
            for m in sorted((m for m in t.getmembers() if m.isfile() and m.name.endswith(".h5")), key=lambda m: m.name):
                out.append((os.path.join(folder, os.path.basename(m.name)), io.BytesIO(t.extractfile(m).read())))
    return out


def load(dirs):
    """Returns (rows, incomplete vitddp files, ceilings {(model, batch): {precision: the
    "ceilings" entry of --gemm-ceilings' JSON}}, failed runs from runs.tsv)."""
    rows, incomplete, ceilings, failed = [], [], {}, []
    for d in dirs:
        for path, source in vitddp_files(d):
            row = read_vitddp(path, source)
            if row and row.get("incomplete"):
                incomplete.append(row)
            elif row:
                rows.append(row)
        for path in sorted(glob.glob(os.path.join(d, "*.json"))):
            with open(path) as f:
                try:
                    r = json.load(f)
                except json.JSONDecodeError:
                    continue
            if r.get("kind") == "peer":
                rows.append(read_peer(path, r))
            elif r.get("kind") == "gemm_ceilings":
                ceilings[(r["model"], int(r["batch_size"]))] = r["ceilings"]
        tsv = os.path.join(d, "runs.tsv")
        if os.path.exists(tsv):
            with open(tsv) as f:
                for rec in csv.DictReader(f, delimiter="\t"):
                    if rec.get("rc", "0") != "0":
                        failed.append(rec)
    for row in rows:
        row["smi"] = smi_peak_gib(row["file"])
    return rows, incomplete, ceilings, failed


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def best_of_rounds(rows):
    """Groups rows by (tool, mode): the best round's steps/s with every round's steps/s, memory
    and compile time the largest over rounds. Returns a list of dicts."""
    groups = {}
    for r in rows:
        groups.setdefault((r["tool"], r["mode"]), []).append(r)
    out = []
    for (tool, mode), rs in groups.items():
        best = max(rs, key=lambda r: r["steps_per_s"])

        def largest(key):
            vals = [r[key] for r in rs if r.get(key) is not None]
            return max(vals) if vals else None
        out.append(dict(best, rounds=[r["steps_per_s"] for r in rs], alloc=largest("alloc"),
                        reserved=largest("reserved"), smi=largest("smi"), compile_s=largest("compile_s")))
    out.sort(key=lambda r: (r["tool"] != "vitddp", -r["steps_per_s"]))
    return out


def ratio_lines(group):
    """The "vitddp / best peer" line of one cell (rows best first). Where fp32 GEMMs ran both
    strict and as 3xTF32 (vitddp's --fp32-matmul tf32x3, JAX's TF32_TF32_F32_X3), one line per
    numerical contract, each vitddp row against the best peer of its own contract, then the fastest
    of each side whatever the contract."""
    ours = [r for r in group if r["tool"] == "vitddp"]
    peers = [r for r in group if r["tool"] != "vitddp"]
    if not ours or not peers:
        return []

    def line(label, o, p):
        return f"vitddp / best peer{label} ({p['tool']} {p['mode']}): {o['steps_per_s'] / p['steps_per_s']:.2f}x steps/s."
    contracts = sorted({r.get("fp32_matmul", "ieee") for r in group})
    if len(contracts) == 1:
        return ["", line("", ours[0], peers[0])]
    out = [""]
    for c in contracts:
        o = [r for r in ours if r.get("fp32_matmul", "ieee") == c]
        p = [r for r in peers if r.get("fp32_matmul", "ieee") == c]
        if o and p:
            out.append(line(", 3xTF32 GEMMs on both sides" if c == "tf32x3" else ", strict fp32 GEMMs on both sides",
                            o[0], p[0]))
    out.append(line(", fastest of each whatever the GEMMs", ours[0], peers[0]))
    return out


def render(rows, incomplete=(), ceilings=None, failed=()):
    """The Markdown text (see the module doc)."""
    ceilings = ceilings or {}
    lines = ["# vitddp and its peers: one ViT training step on one GPU", ""]
    devices = sorted({r.get("device_name") for r in rows if r.get("device_name")})
    if devices:
        lines += [f"Device: {', '.join(devices)}.", ""]
    keys = sorted({(r["model"], r["batch_size"], r["precision"]) for r in rows} |
                  {(f["model"], int(f["batch"]), f["precision"]) for f in failed})
    for model, batch, prec in keys:
        size = vit_shapes.SIZES.get(model)
        lines.append(f"## {model}, batch {batch}, {prec}")
        lines.append("")
        probe = ceilings.get((model, batch), {}).get(prec)
        ceiling = probe["train_tflops"] if probe else None
        if ceiling:
            lines += [f"GEMM ceiling ({prec}, FLOP-weighted over the linear layers' training GEMMs at M = "
                      f"{batch} x {size.seq_len if size else '?'} rows): {ceiling:.1f} TFLOP/s.", ""]
            per = {}
            for g in probe.get("gemms", []):
                per.setdefault(g["linear"], []).append(f"{g['tflops']:.0f}")
            if per:
                lines += ["TFLOP/s of each linear layer's forward / data-gradient / weight-gradient GEMM: " +
                          ", ".join(f"{k} {' / '.join(v)}" for k, v in per.items()) + ".", ""]
        group = best_of_rounds([r for r in rows if (r["model"], r["batch_size"], r["precision"]) == (model, batch, prec)])
        if group:
            lines.append("| tool | mode | steps/s | images/s | TFLOP/s | MFU | median step ms | alloc GiB | "
                         "reserved GiB | smi GiB | compile s | loss first -> last | rounds (steps/s) |")
            lines.append("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |")
        for r in group:
            ips = r["steps_per_s"] * batch
            tflops = vit_shapes.train_tflops(size, ips) if size else None
            mfu = tflops / ceiling if (tflops is not None and ceiling) else None
            lines.append("| " + " | ".join([
                r["tool"], r["mode"], fmt(r["steps_per_s"], ".2f"), fmt(ips, ".1f"), fmt(tflops, ".1f"),
                "-" if mfu is None else f"{100 * mfu:.1f}%", fmt(r["median_step_ms"], ".2f"), fmt(r["alloc"], ".2f"),
                fmt(r["reserved"], ".2f"), fmt(r["smi"], ".2f"), fmt(r["compile_s"], ".1f"),
                "-" if r.get("loss") is None else f"{r['loss'][0]:.4f} -> {r['loss'][1]:.4f}",
                " / ".join(f"{v:.2f}" for v in r["rounds"])]) + " |")
        lines += ratio_lines(group)
        fails = [f for f in failed if (f["model"], int(f["batch"]), f["precision"]) == (model, batch, prec)]
        if fails:
            lines += ["", "Failed runs: " + "; ".join(
                f"{f['tool']} {f['mode']} round {f['round']} (exit {f['rc']}{', timed out' if f['rc'] in ('124', '137') else ''})"
                for f in fails) + "."]
        lines.append("")
    if incomplete:
        lines += ["Incomplete vitddp files: " + "; ".join(f"{os.path.basename(r['file'])} ({r['reason']})" for r in incomplete) + ".", ""]
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+", help="folders with the runs' files")
    a = ap.parse_args(argv)
    for d in a.dirs:
        if not os.path.isdir(d):
            print(f"peers_table.py: {d}: not a folder", file=sys.stderr)
            return 2
    rows, incomplete, ceilings, failed = load(a.dirs)
    if not rows and not failed:
        print(f"peers_table.py: no vitddp results (*.h5) or peer results (*.json) in {', '.join(a.dirs)}", file=sys.stderr)
        return 1
    sys.stdout.write(render(rows, incomplete, ceilings, failed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
