"""`vitddp-report buckets`: the bandwidth of each bucket's all-reduce (nccl-tests' algbw and busbw),
or with --per-step of each step's buckets together, from one results file.

Per bucket (launch order, the /buckets tables' index): its first and last parameter, the bytes on
the wire (buckets/bytes_sent; a 16-bit compressed bucket its 16-bit payload), whether it was
compressed, and over the timed steps the median all-reduce time (buckets/allreduce_time, mean of
the ranks) and the median, minimum and maximum algbw and busbw. Definitions: vitddp_tools.bandwidth.
"""
import argparse
import csv
import io
import json
import math

import numpy as np

from .bandwidth import BucketBandwidth
from .reader import Run


def _num(v):
    """float(v), or None for NaN."""
    v = float(v)
    return None if math.isnan(v) else v


def bucket_rows(run):
    """One dict per bucket: bucket, first_param, last_param, bytes, compressed (0/1/None),
    time_ms (median), algbw_gbps, busbw_gbps (medians; busbw None for one rank), busbw_min_gbps,
    busbw_max_gbps (over the timed steps)."""
    bw = BucketBandwidth(run)
    pb = bw.per_bucket()
    nb = bw.nbytes.shape[1]
    names = {k: run.strings("buckets/" + k) if run.has("buckets/" + k) else [""] * nb for k in ("first_param", "last_param")}
    comp = run.bucket_series("buckets/compressed")[0][bw.timed].max(axis=0) if run.has("buckets/compressed") else None
    rows = []
    for b in range(nb):
        col = bw.busbw[bw.timed, b] if bw.busbw is not None else np.array([])
        col = col[np.isfinite(col)]
        rows.append({
            "bucket": b, "first_param": names["first_param"][b], "last_param": names["last_param"][b],
            "bytes": _num(pb["nbytes"][b]), "compressed": None if comp is None else int(comp[b]),
            "time_ms": _num(pb["seconds"][b] * 1e3), "algbw_gbps": _num(pb["algbw"][b]),
            "busbw_gbps": None if pb["busbw"] is None else _num(pb["busbw"][b]),
            "busbw_min_gbps": float(col.min()) if col.size else None,
            "busbw_max_gbps": float(col.max()) if col.size else None,
        })
    return rows


def step_rows(run):
    """One dict per recorded step: step, timed (0/1), bytes, time_ms (all buckets, rank mean),
    algbw_gbps, busbw_gbps (all the step's buckets together)."""
    bw = BucketBandwidth(run)
    ps = bw.per_step()
    rec = bw.seconds > 0
    nbytes = np.where(rec, bw.nbytes, 0.0).sum(axis=1)
    secs = np.where(rec, bw.seconds, 0.0).sum(axis=1)
    return [{"step": s, "timed": int(bw.timed[s]), "bytes": float(nbytes[s]), "time_ms": float(secs[s] * 1e3),
             "algbw_gbps": _num(ps["algbw"][s]), "busbw_gbps": None if ps["busbw"] is None else _num(ps["busbw"][s])}
            for s in range(nbytes.size)]


def _cell(k, v):
    if v is None:
        return "n/a"
    if k == "bytes":
        return "%d" % v
    if k.endswith("_gbps"):
        return "%.2f" % v
    if k == "time_ms":
        return "%.4f" % v
    return str(v)


def render(rows, fmt):
    """`rows` (list of dicts with the same keys) as 'markdown', 'csv' or 'json' text."""
    if fmt == "json":
        return json.dumps(rows, indent=2) + "\n"
    keys = list(rows[0]) if rows else []
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=keys, lineterminator="\n")
        w.writeheader()
        w.writerows([{k: ("" if v is None else v) for k, v in r.items()} for r in rows])
        return buf.getvalue()
    lines = ["| " + " | ".join(keys) + " |", "| " + " | ".join("---" for _ in keys) + " |"]
    lines += ["| " + " | ".join(_cell(k, r[k]) for k in keys) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def main(argv=None, prog="vitddp-report buckets"):
    """Prints the per-bucket (or --per-step) bandwidth table of one file; returns 0."""
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument("file", metavar="FILE", help="vitddp results file of a DDP run")
    ap.add_argument("--per-step", action="store_true", help="one row per recorded step instead of per bucket")
    ap.add_argument("--format", choices=["markdown", "csv", "json"], default="markdown", help="output format [markdown]")
    a = ap.parse_args(argv)
    with Run(a.file) as run:
        rows = step_rows(run) if a.per_step else bucket_rows(run)
    print(render(rows, a.format), end="")
    return 0
