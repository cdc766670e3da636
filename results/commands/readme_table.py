#!/usr/bin/env python3
"""The README's results table: vitddp's speed beside its peers, from the results files of a folder.

    python3 results/commands/readme_table.py [FOLDER]                   # print the table (Markdown)
    python3 results/commands/readme_table.py [FOLDER] --update README.md # replace it in the README
    python3 results/commands/readme_table.py [FOLDER] --check README.md  # exit 1 if the README's differs

FOLDER (default results/h200x2/speed, the benchmark of results/commands/speed.sh; with --check/--update and no FOLDER, the folder named on the
table's own "Source:" line, else that default) is searched recursively for:
  - vitddp results files (*.h5 whose root attribute `program` is "vitddp", with a
    `summary/steps_per_second` dataset; docs/schema.md), loose or inside tar archives (*.tar,
    *.tar.gz, *.tar.xz, as results folders keep them);
  - peer results (*.json holding an object, or a list of objects, with the keys `model`,
    `precision` and `steps_per_s`, as results/bench_torch_vit.py and results/bench_torch_ddp.py
    write them; optional keys:
    `framework` or `tool`, `mode` or `variant` (the column label), `world_size` (default 1), `comm_hook`
    (default "none"), `batch_size`).

Rows: one per configuration (model, precision, GPUs, --allreduce, --compression, batch) of the
GPU-backend runs with --cuda-graph on (the default) that completed. A "job" is the folder (or
archive) a file lies in; a row takes the latest job that holds its configuration (by the runs'
`start_time`), and the median steps/s per GPU of that job's runs of it (e.g. the same run on two
GPUs of a host). "share of 1 GPU" is that figure over the 1-GPU row of the same model, precision
and batch. Peers come from the row's own job when it has them, else from the latest job that does;
the last column divides vitddp's figure by the peer's ("vs best peer": the fastest of the peers
shown).

The table lies in README.md between the lines `<!-- results-table:begin -->` and
`<!-- results-table:end -->` (`--block NAME`: between `<!-- NAME:begin -->` and `<!-- NAME:end -->`). Exit status: 0; 1 when --check finds a difference (both tables are
printed); 2 for a missing folder, a folder without vitddp runs, or a README without the markers.
"""
import argparse
import io
import json
import os
import statistics
import sys
import tarfile

DEFAULT_BLOCK = "results-table"
SOURCE_PREFIX = "Source: `"
DEFAULT_FOLDER = "results/h200x2/speed"
PRECISION_ORDER = {"fp32": 0, "tf32": 1, "bf16": 2}


class TableError(Exception):
    """A problem with the inputs: one line for the user, exit status 2."""


def _attr(f, name, default=None):
    v = f.attrs.get(name, default)
    return v.decode() if isinstance(v, bytes) else v


def _run_from_h5(h5file, job, name):
    """One vitddp GPU run as a dict, or None when the file is not one (or not a complete run)."""
    import h5py  # imported here so that --help works without h5py

    try:
        with h5py.File(h5file, "r") as f:
            if _attr(f, "program") != "vitddp" or "summary" not in f or "steps_per_second" not in f["summary"]:
                return None
            if _attr(f, "backend") != "gpu" or _attr(f, "stop_reason") != "completed":
                return None
            if _attr(f, "option.cuda-graph", "on") != "on":
                return None
            world = int(_attr(f, "world_size"))
            return {
                "job": job,
                "name": name,
                "start": str(_attr(f, "start_time", "")),
                "model": str(_attr(f, "model")),
                "precision": str(_attr(f, "precision")),
                "gpus": world,
                "allreduce": str(_attr(f, "option.allreduce", "nccl")) if world > 1 else "-",
                "compression": str(_attr(f, "compression", "none")) if world > 1 else "-",
                "batch": int(_attr(f, "batch_size")),
                "steps_per_s": float(f["summary/steps_per_second"][()]),
            }
    except (OSError, KeyError, ValueError, TypeError):
        return None


def _peers_from_json(path, job):
    """The peer results of one JSON file: an object, or a list of objects (several peers in one file)."""
    try:
        with open(path) as fh:
            d = json.load(fh)
    except (OSError, ValueError):
        return []
    return [p for p in (_peer(x, job) for x in (d if isinstance(d, list) else [d])) if p]


def _peer(d, job):
    if not isinstance(d, dict) or not all(k in d for k in ("model", "precision", "steps_per_s")):
        return None
    name = str(d.get("framework", d.get("tool", "peer")))  # results/peers/*.py write "tool"
    framework = {"pytorch": "PyTorch", "torch": "PyTorch", "jax": "JAX"}.get(name.lower(), name)
    mode = d.get("mode") or d.get("variant") or ("DDP" if int(d.get("world_size", 1)) > 1 else "eager")
    world = int(d.get("world_size", 1))
    return {
        "job": job,
        "label": f"{framework} {mode}",
        "model": str(d["model"]),
        "precision": str(d["precision"]),
        "gpus": world,
        "compression": str(d.get("comm_hook", "none")) if world > 1 else "-",
        "batch": int(d.get("batch_size", 32)),
        "steps_per_s": float(d["steps_per_s"]),
    }


def collect(folder):
    """(vitddp runs, peer results) found under `folder` (see the module doc)."""
    if not os.path.isdir(folder):
        raise TableError(f"{folder}: no such folder (give the folder of the speed results as the first argument)")
    runs, peers = [], []
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        for fn in sorted(files):
            path = os.path.join(root, fn)
            rel = os.path.relpath(path, folder)
            if fn.endswith(".h5"):
                r = _run_from_h5(path, os.path.relpath(root, folder), rel)
                if r:
                    runs.append(r)
            elif fn.endswith((".tar", ".tar.gz", ".tgz", ".tar.xz")):
                try:
                    with tarfile.open(path) as tar:
                        for m in sorted(tar.getmembers(), key=lambda m: m.name):
                            if m.isfile() and m.name.endswith(".h5"):
                                data = tar.extractfile(m).read()
                                r = _run_from_h5(io.BytesIO(data), os.path.relpath(root, folder), f"{rel}:{m.name}")
                                if r:
                                    runs.append(r)
                except (OSError, tarfile.TarError) as e:
                    raise TableError(f"{path}: unreadable archive ({e})")
            elif fn.endswith(".json"):
                peers += _peers_from_json(path, os.path.relpath(root, folder))
    if not runs:
        raise TableError(f"{folder}: no completed vitddp GPU results files (*.h5, or inside *.tar.xz)")
    return runs, peers


def _fmt(x, spec=".2f"):
    return "n/a" if x is None else format(x, spec)


def build_rows(runs, peers):
    """The table's rows as dicts, sorted, and the peer column labels."""
    def config(r):
        return (r["model"], r["precision"], r["gpus"], r["allreduce"], r["compression"], r["batch"])

    job_start = {}
    for r in runs:
        job_start[r["job"]] = max(job_start.get(r["job"], ""), r["start"])
    by_config = {}
    for r in runs:
        by_config.setdefault(config(r), []).append(r)
    rows = {}
    for key, rs in by_config.items():
        latest = max({r["job"] for r in rs}, key=lambda j: (job_start[j], j))
        chosen = [r for r in rs if r["job"] == latest]
        rows[key] = {"key": key, "job": latest, "n": len(chosen),
                     "steps_per_s": statistics.median(r["steps_per_s"] for r in chosen)}
    labels = sorted({p["label"] for p in peers})
    peer_job_start = {}
    for p in peers:
        peer_job_start[p["job"]] = job_start.get(p["job"], p["job"])
    for key, row in rows.items():
        model, precision, gpus, _, compression, batch = key
        one = rows.get((model, precision, 1, "-", "-", batch))
        row["share"] = row["steps_per_s"] / one["steps_per_s"] if gpus > 1 and one else None
        row["peers"] = {}
        for label in labels:
            match = [p for p in peers if p["label"] == label and
                     (p["model"], p["precision"], p["gpus"], p["compression"], p["batch"]) ==
                     (model, precision, gpus, compression, batch)]
            if not match:
                continue
            own = [p for p in match if p["job"] == row["job"]]
            if not own:
                latest = max({p["job"] for p in match}, key=lambda j: (peer_job_start[j], j))
                own = [p for p in match if p["job"] == latest]
            row["peers"][label] = statistics.median(p["steps_per_s"] for p in own)
    order = sorted(rows.values(), key=lambda r: (r["key"][0], PRECISION_ORDER.get(r["key"][1], 9), r["key"][1],
                                                 r["key"][2], r["key"][3] != "nccl", r["key"][3],
                                                 r["key"][4] != "none", r["key"][4], r["key"][5]))
    return order, labels


def render(folder, runs, peers, block=DEFAULT_BLOCK):
    """The Markdown block that goes between the markers (without them)."""
    block_arg = "" if block == DEFAULT_BLOCK else f" --block {block}"
    rows, labels = build_rows(runs, peers)
    head = ["model", "precision", "GPUs", "--allreduce", "--compression", "vitddp steps/s per GPU",
            "share of 1 GPU"] + [f"{l} steps/s per GPU" for l in labels]
    if labels:
        head.append(f"vs {labels[0]}" if len(labels) == 1 else "vs best peer")
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
    for r in rows:
        model, precision, gpus, allreduce, compression, batch = r["key"]
        cells = [model if batch == 32 else f"{model}, batch {batch}", precision, str(gpus), allreduce, compression,
                 _fmt(r["steps_per_s"]), "n/a" if r["share"] is None else f"{100 * r['share']:.1f}%"]
        cells += [_fmt(r["peers"].get(l)) for l in labels]
        if labels:
            best = max(r["peers"].values(), default=None)
            cells.append("n/a" if best is None else f"{r['steps_per_s'] / best:.2f}x")
        lines.append("| " + " | ".join(cells) + " |")
    jobs = sorted({folder if r["job"] == "." else os.path.join(folder, r["job"]) for r in rows})
    lines.append("")
    rows_from = "" if jobs == [folder] else f"; rows from {', '.join('`' + j + '`' for j in jobs)}"
    lines.append(f"{SOURCE_PREFIX}{folder}` ({len(runs)} vitddp runs, {len(peers)} peer results{rows_from}). "
                 f"Regenerate with `python3 results/commands/readme_table.py {folder}{block_arg} --update README.md`.")
    return "\n".join(lines) + "\n"


def markers(block):
    """The README lines that open and close the generated block named `block`."""
    return f"<!-- {block}:begin -->", f"<!-- {block}:end -->"


def split_readme(path, block=DEFAULT_BLOCK):
    """(text before and including the opening marker, the block, the closing marker and after)."""
    BEGIN, END = markers(block)
    try:
        text = open(path).read()
    except OSError as e:
        raise TableError(f"{path}: cannot read ({e.strerror})")
    b, e = text.find(BEGIN), text.find(END)
    if b < 0 or e < 0 or e < b:
        raise TableError(f"{path}: no '{BEGIN}' ... '{END}' block")
    b_end = b + len(BEGIN) + 1  # the newline after the marker
    return text[:b_end], text[b_end:e], text[e:]


def folder_named_in(block):
    for line in block.splitlines():
        if line.startswith(SOURCE_PREFIX):
            return line[len(SOURCE_PREFIX):].split("`", 1)[0]
    return None


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder", nargs="?", help=f"results folder [{DEFAULT_FOLDER}; with --check/--update: the "
                    "table's Source line]")
    ap.add_argument("--block", default=DEFAULT_BLOCK, help="name of the README block between "
                    "'<!-- NAME:begin -->' and '<!-- NAME:end -->' [%(default)s]")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--check", metavar="README", help="exit 1 when the README's table differs from a fresh one")
    mode.add_argument("--update", metavar="README", help="replace the README's table")
    a = ap.parse_args(argv)
    readme = a.check or a.update
    try:
        parts = split_readme(readme, a.block) if readme else None
        folder = a.folder or (parts and folder_named_in(parts[1])) or DEFAULT_FOLDER
        block = render(folder, *collect(folder), a.block)
        if a.check:
            if parts[1] == block:
                print(f"{readme}: the results table matches {folder}")
                return 0
            print(f"{readme}: the results table differs from {folder}; regenerate with\n"
                  f"  python3 results/commands/readme_table.py {folder} --update {readme}\n"
                  f"--- in {readme}:\n{parts[1]}--- from {folder}:\n{block}", end="")
            return 1
        if a.update:
            with open(readme, "w") as fh:
                fh.write(parts[0] + block + parts[2])
            print(f"{readme}: results table written from {folder}")
            return 0
        sys.stdout.write(block)
        return 0
    except TableError as e:
        print(f"readme_table.py: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
