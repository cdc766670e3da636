#!/usr/bin/env python3
"""Write the README.md of one results folder from the vitddp HDF5 files it holds.

    python3 results/tools/topic_readme.py DIR --title TITLE --about ABOUT.md --command CMD \\
        [--baseline REGEX] [--include FILE.md ...] [-o DIR/README.md]

Reads every vitddp results file under DIR: plain `*.h5` files and the members of every `h5.tar.xz`
(unpacked into a temporary folder), at any depth. Files are grouped by the folder they lie in
(`.` for DIR itself), one table per folder, one row per file:

  run        the file name without `.h5`
  ranks      world_size (1 with --no-ddp: the 1-GPU figure)
  precision  attribute `precision`
  all-reduce option.allreduce (`nccl` where the file predates the option) and the comm streams
             (option.comm-streams, when not `auto`); compression: option.compression
  options    the options that differ from vitddp's defaults among bucket-cap-mb, nccl-max-ctas,
             gemm-sm-carveout, cuda-graph, attention, patch-embed, grad-as-bucket-view,
             data, model, batch-size, direct-blocks, optimizer-in-backward (docs/schema.md names them
             `option.<name>`)
  steps      timed steps (summary/timed_window, or the steps marked in steps/timed)
  steps/s    summary/steps_per_second (per GPU: every rank runs the same steps)
  share      steps/s over the baseline's steps/s, %: the baseline is, in the same folder and
             precision, the first 1-rank file (sorted by name) whose name matches --baseline
             (default: any 1-rank file)
  forward, backward, exposed: medians over rank 0's timed steps of timing/forward,
             timing/backward and timing/exposed_comm, ms

The README: the title, ABOUT (Markdown: what the folder measures), the command that produced it
and the one that rewrites the README, the build (the date the runs started, from the files'
`start_time`, and the `versions` attribute: CUDA, NCCL, cuBLASLt, cuDNN, MPI), the devices, the
tables, then every --include file verbatim (tables made by other scripts: speed_table.py,
power_table.py, logs' tables), and last the section `## Notes` of the README already in DIR (text
written by hand about the data as measured; kept when the README is rewritten).

Exit 0; 2 when DIR does not exist or holds no results file and no --include file.
"""
import argparse
import glob
import os
import re
import sys
import tarfile
import tempfile

NOTES = "## Notes"
# vitddp's defaults (vitddp --help), and of options measured and no longer built (wgrad-stream:
# results/h100/wgrad-stream); an option is shown only when it differs.
DEFAULTS = {
    "bucket-cap-mb": "25", "nccl-max-ctas": "0", "gemm-sm-carveout": "0", "cuda-graph": "on",
    "attention": "auto", "patch-embed": "auto", "grad-as-bucket-view": "on", "data": "synthetic",
    "model": "vit_l_32", "batch-size": "32", "direct-blocks": "0", "optimizer-in-backward": "false",
    "fp32-matmul": "ieee", "gemm-autotune": "16", "wgrad-stream": "off",
}


def text(v):
    """An HDF5 attribute as str (bytes decoded, arrays of one value unwrapped)."""
    if isinstance(v, bytes):
        return v.decode()
    if hasattr(v, "tolist"):
        v = v.tolist()
    if isinstance(v, list):
        return ", ".join(text(x) for x in v)
    return str(v)


def collect(top, tmp):
    """(group folder, path) of every .h5 under `top`, archives unpacked into `tmp`."""
    found = []
    for path in sorted(glob.glob(os.path.join(top, "**", "*.h5"), recursive=True)):
        found.append((os.path.relpath(os.path.dirname(path), top), path))
    for k, arch in enumerate(sorted(glob.glob(os.path.join(top, "**", "h5.tar.xz"), recursive=True))):
        group = os.path.relpath(os.path.dirname(arch), top)
        dest = os.path.join(tmp, str(k))
        with tarfile.open(arch) as t:
            members = [m for m in t.getmembers() if m.isfile() and m.name.endswith(".h5")
                       and not os.path.isabs(m.name) and ".." not in m.name.split("/")]
            t.extractall(dest, members=members)
        for m in sorted(members, key=lambda m: m.name):
            sub = os.path.dirname(m.name)
            found.append((os.path.normpath(os.path.join(group, sub)), os.path.join(dest, m.name)))
    return found


def read(path):
    """The row of one results file, or None when it is not a readable vitddp file."""
    import h5py
    import numpy as np
    try:
        with h5py.File(path, "r") as f:
            a = f.attrs
            opt = lambda k, d="": text(a.get("option." + k, d))
            timed = f["steps/timed"][0] == 1 if "steps/timed" in f else None
            def med(name):
                if name not in f or timed is None or not timed.any():
                    return float("nan")
                return 1e3 * float(np.median(f[name][0][timed]))
            shown = [f"{k} {opt(k)}" for k, d in DEFAULTS.items() if opt(k, d) not in (d, "")]
            # an IDX data folder by its own name only (where it lay on the measuring machine says nothing)
            shown = [f"data idx:{os.path.basename(x[9:].rstrip('/'))}" if x.startswith("data idx:") else x for x in shown]
            streams = opt("comm-streams", "auto")
            allreduce = opt("allreduce", "nccl") if int(a.get("ddp", 1)) else "none (--no-ddp)"
            if text(a.get("backend", "gpu")) == "cpu" and int(a.get("ddp", 1)):
                allreduce = "MPI (CPU backend)"
            if streams not in ("auto", "0") and int(a.get("ddp", 1)):
                allreduce += f", {streams} comm stream{'s' if streams != '1' else ''}"
            steps = int(timed.sum()) if timed is not None else 0
            return {
                "ranks": int(a.get("world_size", 1)), "precision": text(a.get("precision", "fp32")),
                "allreduce": allreduce, "compression": opt("compression", "none"), "options": ", ".join(shown),
                "steps": steps, "sps": float(f["summary/steps_per_second"][()]),
                "fwd": med("timing/forward"), "bwd": med("timing/backward"), "exp": med("timing/exposed_comm"),
                "start": text(a.get("start_time", "")), "versions": text(a.get("versions", "")),
                "devices": text(a.get("device_names", "")),
            }
    except (OSError, KeyError, ValueError):
        return None


def ms(x):
    return "" if x != x else f"{x:.2f}"


def tables(rows, baseline):
    """Markdown: one table per group folder."""
    out = []
    for group in sorted({g for g, _, _ in rows}):
        mine = sorted([(n, r) for g, n, r in rows if g == group], key=lambda t: t[0])
        base = {}
        for n, r in mine:
            if r["ranks"] == 1 and r["precision"] not in base and re.search(baseline, n):
                base[r["precision"]] = r["sps"]
        out.append(f"### {'this folder' if group == '.' else group + '/'}\n")
        out.append("| run | ranks | precision | all-reduce | compression | options | timed steps | steps/s per GPU "
                   "| share of 1 GPU | forward ms | backward ms | exposed comm ms |")
        out.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for n, r in mine:
            b = base.get(r["precision"])
            share = f"{100 * r['sps'] / b:.1f}%" if b else ""
            out.append(f"| {n} | {r['ranks']} | {r['precision']} | {r['allreduce']} | {r['compression']} | "
                       f"{r['options']} | {r['steps']} | {r['sps']:.2f} | {share} | {ms(r['fwd'])} | "
                       f"{ms(r['bwd'])} | {ms(r['exp'])} |")
        out.append("")
    return "\n".join(out)


def kept_notes(readme):
    """The `## Notes` section of an existing README (to its end), or ''."""
    if not os.path.isfile(readme):
        return ""
    lines = open(readme, encoding="utf-8").read().split("\n")
    for i, line in enumerate(lines):
        if line.strip() == NOTES:
            return "\n".join(lines[i:]).rstrip() + "\n"
    return ""


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", metavar="DIR")
    ap.add_argument("--title", required=True)
    ap.add_argument("--about", metavar="FILE", help="Markdown: what the folder measures ('-': stdin)")
    ap.add_argument("--command", default="", help="the command that produced the folder")
    ap.add_argument("--rewrite", default="", help="the command that rewrites this README")
    ap.add_argument("--baseline", default="", metavar="REGEX", help="1-rank files eligible as the baseline")
    ap.add_argument("--include", action="append", default=[], metavar="FILE", help="Markdown appended verbatim")
    ap.add_argument("-o", "--output", help="write here instead of stdout")
    args = ap.parse_args(argv)
    if not os.path.isdir(args.dir):
        print(f"topic_readme.py: {args.dir}: no such folder", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        for group, path in collect(args.dir, tmp):
            r = read(path)
            if r:
                rows.append((group, os.path.basename(path)[:-3], r))
    includes = [p for p in args.include if os.path.isfile(p) and os.path.getsize(p) > 0]
    if not rows and not includes:
        print(f"topic_readme.py: {args.dir}: no vitddp results file (*.h5, h5.tar.xz) and nothing to include",
              file=sys.stderr)
        return 2
    about = sys.stdin.read() if args.about == "-" else (open(args.about).read() if args.about else "")
    parts = [f"# {args.title}\n", about.strip() + "\n"]
    if args.command:
        parts.append(f"Produced by `{args.command}`." + (f" This README is rewritten from the files by "
                                                          f"`{args.rewrite}`." if args.rewrite else "") + "\n")
    if rows:
        days = sorted({r["start"][:10] for _, _, r in rows if r["start"]})
        times = sorted(r["start"] for _, _, r in rows if r["start"])
        span = f"{times[0]} to {times[-1]}" if times else "unknown"
        parts.append(f"Build: vitddp as of {', '.join(days) or 'an unknown date'} (the runs started {span}); "
                     f"{'; '.join(sorted({r['versions'] for _, _, r in rows if r['versions']}))}. "
                     f"Devices: {', '.join(sorted({d.strip() for _, _, r in rows for d in r['devices'].split(',') if d.strip()}))}.\n")
        parts.append("## Runs\n\nOne row per results file (`tools/topic_readme.py`: medians over rank 0's timed "
                     "steps; share = steps/s per GPU over the 1-GPU run of the same precision in the same "
                     "folder).\n")
        parts.append(tables(rows, args.baseline))
    for p in includes:
        parts.append(open(p, encoding="utf-8").read().rstrip() + "\n")
    out = args.output or os.path.join(args.dir, "README.md")
    notes = kept_notes(os.path.join(args.dir, "README.md"))
    if notes:
        parts.append(notes)
    doc = "\n".join(parts)
    if args.output == "-":
        sys.stdout.write(doc)
    else:
        with open(out, "w", encoding="utf-8") as f:
            f.write(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
