"""`vitddp-report summary` and `vitddp-report compare`: run metrics as Markdown, CSV or JSON.

summary: per file, the configuration that matters (metrics.CONFIG_FIELDS) and the metrics
(metrics.METRIC_FIELDS); Markdown has one column per file.
compare: the options that differ between the files (option.* attributes and the configuration
fields), then the metrics side by side with the ratio of each to the first file's.
"""
import csv
import io
import json
import math

from . import bandwidth as B
from . import metrics as M
from .reader import open_runs

# Options that name outputs or logging, not the experiment: left out of `compare`.
IGNORED_OPTIONS = {"out", "overwrite", "progress-every", "trace", "save-weights", "checkpoint-dir"}
# Options shown through a configuration field of metrics.CONFIG_FIELDS (not listed twice).
CONFIG_OPTIONS = {"model": "model", "batch_size": "batch-size", "grad_accum_steps": "grad-accum-steps",
                  "precision": "precision", "compression": "compression", "allreduce": "allreduce",
                  "attention": "attention", "data": "data", "bucket_cap_mb": "bucket-cap-mb",
                  "backend": "backend", "ddp": "no-ddp", "overlap": "no-overlap"}


def fmt_value(key, v):
    """A metric or configuration value as table text ("n/a" for None or NaN)."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    if isinstance(v, str):
        return v
    if key == "mfu":
        return "%.1f%%" % (100 * v)
    if key in ("images_per_second",):
        return "%.1f" % v
    if key == "tflops_per_rank":
        return "%.4g" % v
    if key == "step_time_cv":
        return "%.4f" % v
    if key in ("steps_per_second",) or key.endswith("_ms"):
        return "%.3f" % v
    if key.endswith("_bytes"):
        return "%d" % round(v)
    if key.endswith("_gbps") or key.endswith("_gib"):
        return "%.2f" % v
    if isinstance(v, float):
        return "%g" % v
    return str(v)


def _label(label, units):
    """A row label with its units in brackets, unless dimensionless or already named."""
    return label if units == "1" or units in label else "%s (%s)" % (label, units)


def _md_table(header, rows):
    """Markdown table lines: first column left-aligned, the others right-aligned."""
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(["---"] + ["---:"] * (len(header) - 1)) + " |"]
    return lines + ["| " + " | ".join(r) + " |" for r in rows]


def _json_value(v):
    """None for NaN (JSON has no NaN), else v."""
    return None if isinstance(v, float) and math.isnan(v) else v


def _csv_value(v):
    """"" for None or NaN, else v."""
    v = _json_value(v)
    return "" if v is None else v


def collect(paths, probe=None):
    """run_metrics of every file (all opened first, so a bad file fails before any output); with
    `probe` (bandwidth.read_probe's curve) also add_probe's fields."""
    runs = open_runs(paths)
    try:
        ms = [M.run_metrics(r) for r in runs]
        if probe is not None:
            add_probe(ms, runs, probe)
        return ms, runs
    finally:
        for r in runs:
            r.close()


NOTES = ("Timed steps only (`steps/timed` = 1). images/s = steps/s x batch per rank x grad accumulation x "
         "world size; TFLOP/s = 3 x forward FLOPs x images/s per rank; MFU: `summary/mfu`, else against the "
         "measured H200 matmul ceiling of the precision (bf16 781, tf32 361, fp32 51 TFLOP/s); step time: "
         "`timing/step_time` (device) of the slowest rank, CV = sample standard deviation / mean; exposed comm: "
         "median of the slowest rank's `timing/exposed_comm`; algbw / busbw: nccl-tests' definitions "
         "(busbw = algbw x 2(n-1)/n for an all-reduce, x (n-1)/n for ZeRO-1's reduce-scatter), bytes on the wire (`buckets/bytes_sent`) over the rank-mean "
         "`buckets/allreduce_time`, all buckets of a step together, median over the steps; GB/s = 1e9 bytes/s.")


PROBE_FIELDS = [  # summary --probe: (key, label, units)
    ("bucket_median_bytes", "median bucket size (bytes on the wire)", "bytes"),
    ("probe_busbw_gbps", "link probe busbw at that size", "GB/s"),
]

PROBE_NOTE = ("Link probe (`--probe`): the probe file's all-reduce busbw (`link_probe/allreduce/busbw`, "
              "vitddp-probe) at the run's median bucket size, interpolated linearly in log2(bytes) between the "
              "two nearest probed sizes (n/a outside the probed range), next to the run's own busbw median.")


def add_probe(ms, runs, probe):
    """Adds PROBE_FIELDS to each metric dict of `ms` (runs in the same order): the median bucket size
    (bandwidth.median_bucket_bytes; None without per-bucket times) and the probe's busbw there
    (bandwidth.busbw_at of `probe` = bandwidth.read_probe's curve)."""
    for m, r in zip(ms, runs):
        m["bucket_median_bytes"] = m["probe_busbw_gbps"] = None
        if r.ddp and r.has("buckets/allreduce_time"):
            m["bucket_median_bytes"] = B.median_bucket_bytes(r)
            m["probe_busbw_gbps"] = B.busbw_at(probe, m["bucket_median_bytes"])


def summary_text(ms, fmt):
    """The summary of metric dicts `ms` as 'markdown', 'csv' or 'json' text; with PROBE_FIELDS
    (add_probe) when the first dict has them."""
    probe = bool(ms) and "probe_busbw_gbps" in ms[0]
    metric_fields = M.METRIC_FIELDS + (PROBE_FIELDS if probe else [])
    if fmt == "json":
        units = {k: u for k, _, u in metric_fields}
        units.update({"bucket_cap_mb": "MiB", "images_per_second_file": "images/s"})
        return json.dumps({"runs": [{k: _json_value(v) for k, v in m.items()} for m in ms], "units": units},
                          indent=2) + "\n"
    keys = ["file"] + [k for k, _ in M.CONFIG_FIELDS] + [k for k, _, _ in metric_fields]
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(keys)
        for m in ms:
            w.writerow([_csv_value(m[k]) for k in keys])
        return buf.getvalue()
    header = ["", *[m["file"] for m in ms]]
    rows = [[label] + [fmt_value(k, m[k]) for m in ms] for k, label in M.CONFIG_FIELDS]
    rows += [[_label(label, u)] + [fmt_value(k, m[k]) for m in ms] for k, label, u in metric_fields]
    lines = _md_table(header, rows) + ["", NOTES] + (["", PROBE_NOTE] if probe else [])
    for m in ms:
        f = m["images_per_second_file"]
        if f is not None and abs(f - m["images_per_second"]) > 1e-6 * max(1.0, abs(f)):
            lines.append("`%s`: the file's `summary/images_per_second` reads %.1f; the figure above is computed "
                         "from steps/s with grad accumulation %d." % (m["file"], f, m["grad_accum_steps"]))
    return "\n".join(lines) + "\n"


def differing(runs, ms):
    """{key: [value per run]} of the configuration fields and option.* attributes that differ."""
    out = {}
    for k, _ in M.CONFIG_FIELDS:
        vals = [m[k] for m in ms]
        if len({repr(v) for v in vals}) > 1:
            out[k] = vals
    opts = [r.options() for r in runs]
    for k in sorted(set().union(*opts) - IGNORED_OPTIONS - set(CONFIG_OPTIONS.values())):
        vals = [o.get(k) for o in opts]
        if len(set(vals)) > 1:
            out["option." + k] = vals
    return out


def ratio(v, base):
    """v / base, or None when either is missing or base is 0."""
    if v is None or base is None or base == 0 or any(isinstance(x, float) and math.isnan(x) for x in (v, base)):
        return None
    return v / base


def compare_text(paths, fmt):
    """The comparison of the files `paths` (first = reference) as 'markdown', 'csv' or 'json'."""
    runs = open_runs(paths)
    try:
        ms = [M.run_metrics(r) for r in runs]
        diff = differing(runs, ms)
    finally:
        for r in runs:
            r.close()
    names = [m["file"] for m in ms]
    if fmt == "json":
        return json.dumps({
            "files": names, "reference": names[0], "differing": diff,
            "metrics": {k: {"units": u, "values": [_json_value(m[k]) for m in ms],
                            "ratio_to_first": [ratio(m[k], ms[0][k]) for m in ms]}
                        for k, _, u in M.METRIC_FIELDS},
        }, indent=2) + "\n"
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["kind", "field", "units", "file", "value", "ratio_to_first"])
        for k, vals in diff.items():
            for n, v in zip(names, vals):
                w.writerow(["option", k, "", n, _csv_value(v), ""])
        for k, _, u in M.METRIC_FIELDS:
            for n, m in zip(names, ms):
                r = ratio(m[k], ms[0][k]) if k in M.RATIO_FIELDS else None
                w.writerow(["metric", k, u, n, _csv_value(m[k]), _csv_value(r)])
        return buf.getvalue()
    lines = ["## Options that differ", ""]
    if diff:
        labels = dict(M.CONFIG_FIELDS)
        lines += _md_table(["setting", *names], [[labels.get(k, k)] + ["-" if v is None else fmt_value(k, v) for v in vals]
                                                 for k, vals in diff.items()])
    else:
        lines.append("None: the files share every option (repeats of one configuration).")
    lines += ["", "## Metrics (ratio to `%s`)" % names[0], ""]
    rows = []
    for k, label, u in M.METRIC_FIELDS:
        cells = [fmt_value(k, ms[0][k])]
        for m in ms[1:]:
            r = ratio(m[k], ms[0][k]) if k in M.RATIO_FIELDS else None
            cells.append(fmt_value(k, m[k]) + ("" if r is None else " (%.3fx)" % r))
        rows.append([_label(label, u)] + cells)
    lines += _md_table(["metric", *names], rows) + ["", NOTES]
    return "\n".join(lines) + "\n"
