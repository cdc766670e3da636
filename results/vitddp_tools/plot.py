"""vitddp-plot: the results table and plots of vitddp runs, from their HDF5 files.

Reads the files vitddp writes (layout: docs/schema.md) through vitddp_tools.reader and draws
with matplotlib (Agg backend, no display needed). Subcommands:

  summary FILE...                 results table in Markdown, one row per file
  phases FILE... -o OUT           stacked bars per rank: mean time of each phase of a timed step
  timeline FILE --steps 10,11 -o OUT
                                  compute stream and comm stream per rank against time (as nsys)
  sweep FILE... -o OUT            steps/s per rank against bucket size, one line per compression
  scaling FILE... -o OUT          steps/s per rank and scaling efficiency against number of GPUs
  eval FILE... -o OUT             test accuracy and loss against optimizer step (--eval-every)
  busbw FILE... -o OUT            all-reduce bus bandwidth per bucket against bucket size

Plots are written as PNG or SVG, chosen by the extension of -o, or both with --format both.
Errors (missing file, dataset or attribute; unusable arguments) print one line naming what is
wrong and exit with status 2. `vitddp-plot SUBCOMMAND --help` describes each subcommand.
"""
import argparse
import os
import sys

import numpy as np
from matplotlib.ticker import FuncFormatter, NullFormatter

from .bandwidth import BucketBandwidth, link_probe, read_probe
from .plot_style import (COLORS, HATCH, PHASE_LABELS, PlotError, comm_name, legend_outside, output_paths,  # noqa: F401
                         plt, save)
from .plot_timeline import cmd_timeline, parse_steps  # noqa: F401 (parse_steps: part of this module's API)
from .reader import Run, check_outputs, open_runs, run_command, text as _text, write_text


# ----------------------------------------------------------------------------------------- summary

SUMMARY_COLUMNS = [
    ("file", "l"), ("model", "l"), ("world size", "r"), ("backend", "l"), ("precision", "l"),
    ("bucket cap (MiB)", "r"), ("compression", "l"), ("overlap", "l"), ("ddp", "l"),
    ("steps/s per rank", "r"), ("images/s", "r"), ("TFLOP/s per rank", "r"), ("median step (ms)", "r"),
    ("exposed comm rank 0 (ms)", "r"), ("exposed comm max rank (ms)", "r"), ("speed-up", "r"),
]


def summary_row(run, baseline_ips):
    """The table cells of one run (strings, in SUMMARY_COLUMNS order)."""
    exposed = run.timed_mean_ms("timing/exposed_comm")
    ips = run.images_per_second()  # steps/s x batch x grad accumulation x world size
    flops = run.attr("forward_flops_per_image", None)
    tflops = 3.0 * float(flops) * ips / run.world_size / 1e12 if flops is not None else run.summary("tflops_per_rank")
    return [
        run.name, run.model, "%d" % run.world_size, run.backend, run.precision,
        "%g" % run.bucket_cap_mb if run.ddp else "-",  # without DDP there are no buckets to speak of
        run.compression if run.ddp else "-", ("yes" if run.overlap else "no") if run.ddp else "-",
        "yes" if run.ddp else "no",
        "%.2f" % run.summary("steps_per_second"), "%.1f" % ips, _fmt_small(tflops),
        "%.2f" % (run.summary("median_step_time") * 1e3), "%.3f" % exposed[0], "%.3f" % exposed.max(),
        "%.2fx" % (ips / baseline_ips) if baseline_ips > 0 else "n/a",
    ]


def _fmt_small(v):
    """Two decimals, or two significant digits for values below 0.01 (TFLOP/s of tiny CPU runs)."""
    return "%.2f" % v if v == 0 or abs(v) >= 0.01 else "%.2g" % v


def markdown_table(header, aligns, rows):
    """A Markdown table (GitHub style) with the given column alignments ('l' or 'r')."""
    lines = ["| " + " | ".join(header) + " |",
             "| " + " | ".join("---:" if a == "r" else "---" for a in aligns) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def cmd_summary(a):
    """`summary`: prints (and with -o writes) the results table of the given files."""
    runs = open_runs(a.files)
    base = Run(a.baseline) if a.baseline else runs[0]
    base_ips = base.images_per_second()
    rows = [summary_row(r, base_ips) for r in runs]
    table = markdown_table([c for c, _ in SUMMARY_COLUMNS], [al for _, al in SUMMARY_COLUMNS], rows)
    ntimed = sorted({int(r.timed().sum()) for r in runs})
    notes = [
        "",
        "steps/s per rank: timed steps / host wall time of the timed window on rank 0 "
        "(`summary/steps_per_second`); images/s: all ranks, steps/s x batch x grad accumulation x ranks; TFLOP/s: 3 x forward FLOPs x images/s per rank; "
        "median step: device time, rank 0; exposed comm: mean of `timing/exposed_comm` over the %s timed "
        "steps, on rank 0 and on the rank where it is largest; speed-up: images/s (all ranks) relative to "
        "`%s`." % ("/".join(str(n) for n in ntimed), base.name),
    ]
    text = table + ("\n" + "\n".join(notes) if not a.no_notes else "") + "\n"
    sys.stdout.write(text)
    if a.output:
        write_text(a.output, text)
        print("wrote %s" % a.output, file=sys.stderr)
    return 0


# ----------------------------------------------------------------------------------------- phases

PHASES = ["data_wait", "forward", "backward", "exposed_comm", "optimizer"]


def cmd_phases(a):
    """`phases`: stacked bars per rank (and per file) of the mean phase times of the timed steps."""
    output_paths(a.output, a.format)  # fail on a bad -o before reading anything
    runs = open_runs(a.files)
    bars = []  # (label, {phase: ms}, step ms)
    for run in runs:
        means = {p: run.timed_mean_ms("timing/" + p) for p in PHASES}
        step = run.timed_mean_ms("timing/step_time")
        for r in range(run.world_size):
            label = "rank %d" % r if len(runs) == 1 else "%s\nrank %d" % (run.label, r)
            bars.append((label, {p: means[p][r] for p in PHASES}, step[r]))
    n = len(bars)
    fig, ax = plt.subplots(figsize=(max(6.5, 1.3 * n + 3.0), 6.0))
    x = np.arange(n)
    width = 0.6
    bottoms = np.zeros(n)
    totals = np.array([sum(v.values()) for _, v, _ in bars])
    top = totals.max() if n else 1.0
    for p in PHASES:
        vals = np.array([v[p] for _, v, _ in bars])
        ax.bar(x, vals, width, bottom=bottoms, color=COLORS[p], edgecolor="black", linewidth=0.5,
               hatch=HATCH.get(p), label=PHASE_LABELS[p])
        for i, v in enumerate(vals):  # value inside the segment when it is tall enough to hold it
            if v >= 0.045 * top:
                ax.text(x[i], bottoms[i] + v / 2, "%.1f" % v, ha="center", va="center", fontsize=10,
                        color="white" if p in ("backward", "data_wait") else "black",
                        bbox=dict(facecolor=COLORS[p], edgecolor="none", pad=1.5) if p in HATCH else None)
        bottoms += vals
    for i, t in enumerate(totals):
        ax.text(x[i], t + 0.01 * top, "%.1f ms" % t, ha="center", va="bottom", fontsize=10, fontweight="bold")
    ax.set_xlim(-0.5, n - 0.5)
    ax.set_ylim(0, top * 1.08)
    ax.set_ylabel("mean time per step (ms)")
    ax.set_xticks(x)
    ax.set_xticklabels([])
    ax.tick_params(axis="x", length=0)
    title = "Phases of a training step (mean of the timed steps)"
    if len(runs) == 1:
        title += "\n" + runs[0].config_text()
    ax.set_title(title)
    _legend_reversed(ax)  # top of the stack first
    # Table of the exact values under the bars, one column per bar (small phases are invisible).
    rows = PHASES + ["step (device)"]
    cells = [["%.3f" % v[p] for _, v, _ in bars] for p in PHASES] + [["%.2f" % s for _, _, s in bars]]
    tab = ax.table(cellText=cells, rowLabels=[PHASE_LABELS.get(p, p) + " (ms)" for p in rows],
                   colLabels=[b[0] for b in bars], cellLoc="center", loc="bottom",
                   bbox=[0.0, -0.08 - 0.065 * (len(rows) + 1.6), 1.0, 0.065 * (len(rows) + 1.6)])
    tab.auto_set_font_size(False)
    tab.set_fontsize(10)
    for (r, c), cell in tab.get_celld().items():
        cell.set_linewidth(0.3)
        if r == 0:
            cell.set_text_props(fontweight="bold")
    ntimed = sorted({int(r.timed().sum()) for r in runs})
    ax.annotate("Means over the %s timed steps. The compute phases (CUDA events on the compute stream; the steady\n"
                "clock on the CPU backend) add up to the step time; data wait is host time blocked on the data source."
                % "/".join(str(k) for k in ntimed),
                xy=(0, 0), xycoords="axes fraction", xytext=(0, -0.1 - 0.065 * (len(rows) + 1.6)),
                textcoords="axes fraction", ha="left", va="top", fontsize=9, color="#444444")
    save(fig, a.output, a.format)
    return 0


def _legend_reversed(ax):
    """Legend outside the axes with the entries in reverse order (top of the stack first)."""
    h, l = ax.get_legend_handles_labels()
    return ax.legend(h[::-1], l[::-1], loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0,
                     frameon=False)


# ----------------------------------------------------------------------------------------- sweep / scaling

def _varying(runs, keys):
    """The configuration keys (from `keys`) whose values differ between runs."""
    return [k for k in keys if len({_cfg(r)[k] for r in runs}) > 1]


def _cfg(run):
    """The configuration of a run as a dict of comparable values."""
    return {
        "model": run.model, "backend": run.backend, "precision": run.precision,
        "compression": run.compression, "bucket cap": "%g MiB" % run.bucket_cap_mb,
        "overlap": "overlap" if run.overlap else "no overlap", "batch": "batch %d" % run.batch_size,
        "world size": "%d rank%s" % (run.world_size, "" if run.world_size == 1 else "s"),
    }


def _fmt_mib(x, _pos=None):
    """Tick label for a bucket size in MiB."""
    return "%g" % x


def cmd_sweep(a):
    """`sweep`: steps/s per rank against bucket size, one line per compression (and other varying keys)."""
    output_paths(a.output, a.format)  # fail on a bad -o before reading anything
    runs = [r for r in open_runs(a.files)]
    ddp_runs = [r for r in runs if r.ddp]
    if not ddp_runs:
        raise PlotError("sweep: none of the files is a DDP run (bucket size has no effect without DDP)")
    extra = _varying(ddp_runs, ["precision", "world size", "model", "backend", "overlap", "batch"])
    groups = {}
    for r in ddp_runs:
        c = _cfg(r)
        key = (r.compression,) + tuple(c[k] for k in extra)
        groups.setdefault(key, []).append(r)
    fig, ax = plt.subplots(figsize=(8.5, 5.2))
    markers = "osD^vP*X"
    for i, (key, rs) in enumerate(sorted(groups.items())):
        caps = sorted({r.bucket_cap_mb for r in rs})
        means = [np.mean([r.summary("steps_per_second") for r in rs if r.bucket_cap_mb == c]) for c in caps]
        label = key[0] + ("" if not extra else " (" + ", ".join(key[1:]) + ")")
        line, = ax.plot(caps, means, marker=markers[i % len(markers)], linewidth=1.8, markersize=7, label=label)
        for r in rs:  # every file as a small point, so repeats show their spread
            ax.plot([r.bucket_cap_mb], [r.summary("steps_per_second")], marker=".", color=line.get_color(),
                    alpha=0.5, linestyle="none")
        for c, m in zip(caps, means):
            nb = {r.num_buckets for r in rs if r.bucket_cap_mb == c}
            ax.annotate("%s bkt" % "/".join(str(n) for n in sorted(nb)), (c, m), textcoords="offset points",
                        xytext=(0, 8), ha="center", fontsize=8, color="#444444")
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(_fmt_mib))
    ax.xaxis.set_minor_formatter(NullFormatter())
    caps_all = sorted({r.bucket_cap_mb for r in ddp_runs})
    ax.set_xticks(caps_all)
    ax.set_xlabel("bucket size, --bucket-cap-mb (MiB, log scale)")
    ax.set_ylabel("throughput (steps/s per rank)")
    ax.set_ylim(bottom=0, top=ax.get_ylim()[1] * 1.1)
    ax.grid(True, which="major", color="#DDDDDD", linewidth=0.6)
    common = _cfg(ddp_runs[0])
    fixed = [common[k] for k in ("model", "world size", "backend", "precision", "batch") if k not in extra]
    ax.set_title("Throughput against bucket size\n" + ", ".join(fixed))
    legend_outside(ax, title="compression" + ("" if not extra else " (" + ", ".join(extra) + ")"))
    save(fig, a.output, a.format)
    return 0


SCALING_KEYS = ["model", "backend", "precision", "batch", "bucket cap", "compression", "overlap"]
SCALING_BASE_KEYS = ["model", "backend", "precision", "batch"]


def _scaling_lines(runs):
    """{configuration: runs}: a line is one configuration (SCALING_KEYS) with world size on the x axis;
    DDP on/off does not split lines: a 1-rank run without DDP joins every line of the same model,
    backend, precision and batch that has no 1-rank run of its own (the natural baseline), else it
    is a line of its own."""
    def key_of(r, ks):
        """The values of configuration keys `ks` of run `r`, as a tuple."""
        c = _cfg(r)
        return tuple(c[k] for k in ks)

    lines = {}
    for r in runs:
        if r.world_size > 1 or r.ddp:
            lines.setdefault(key_of(r, SCALING_KEYS), []).append(r)
    for r in runs:
        if r.world_size > 1 or r.ddp:
            continue
        joined = False
        for rs in lines.values():
            if key_of(rs[0], SCALING_BASE_KEYS) == key_of(r, SCALING_BASE_KEYS) and not any(x.world_size == 1 for x in rs):
                rs.append(r)
                joined = True
        if not joined:
            lines.setdefault(key_of(r, SCALING_BASE_KEYS) + ("no DDP",) * (len(SCALING_KEYS) - len(SCALING_BASE_KEYS)),
                             []).append(r)
    return lines


def _scaling_points(rs):
    """A line's points: (world sizes ascending, mean steps/s per rank at each, the most runs averaged
    into one point)."""
    ws = sorted({r.world_size for r in rs})
    at = [[r.summary("steps_per_second") for r in rs if r.world_size == w] for w in ws]
    return ws, [float(np.mean(s)) for s in at], max(len(s) for s in at)


def _scaling_label(c, vary, rs, ref_w):
    """A line's legend entry: the configuration values that vary between the runs, and what its
    efficiency is relative to."""
    label = ", ".join(c[v] for v in vary if v in c) or ", ".join(c[x] for x in ("model", "precision", "bucket cap"))
    if c.get("bucket cap", "").endswith("MiB"):
        label = label.replace(c["bucket cap"], c["bucket cap"] + " buckets")
    if ref_w != 1:
        label += "\n(vs %d ranks: no 1-rank run)" % ref_w
    elif any(r.world_size == 1 and not r.ddp for r in rs):
        label += "\n(1 rank: without DDP)"
    return label


def _scaling_axes(ax1, ax2, all_ws):
    """The GPU-count x axes (log2 from 8x on), labels, limits and titles of both panels."""
    for ax in (ax1, ax2):
        if len(all_ws) > 1 and all_ws[-1] / all_ws[0] >= 8:
            ax.set_xscale("log", base=2)
        ax.set_xticks(all_ws)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _p: "%d" % round(x)))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("number of GPUs (MPI ranks)")
        ax.margins(x=0.08)
        ax.grid(True, color="#DDDDDD", linewidth=0.6)
        if len(all_ws) == 1:
            ax.set_xlim(all_ws[0] - 1, all_ws[0] + 1)
    ax1.set_ylabel("throughput (steps/s per rank)")
    ax1.set_ylim(bottom=0, top=ax1.get_ylim()[1] * 1.12)
    ax1.set_title("Throughput per rank")
    ax2.axhline(100, color="#888888", linestyle="--", linewidth=1)
    ax2.set_ylabel("scaling efficiency (% of 1-rank steps/s)")
    lo, hi = ax2.get_ylim()
    ax2.set_ylim(min(0, lo), max(110, hi * 1.05))
    ax2.set_title("Scaling efficiency")


def cmd_scaling(a):
    """`scaling`: steps/s per rank and efficiency against number of GPUs, one line per configuration."""
    output_paths(a.output, a.format)  # fail on a bad -o before reading anything
    runs = open_runs(a.files)
    lines = _scaling_lines(runs)
    vary = _varying(runs, SCALING_KEYS)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12.5, 5.0))
    markers = "osD^vP*X"
    all_ws = sorted({r.world_size for r in runs})
    for i, (k, rs) in enumerate(sorted(lines.items())):
        ws, sps, repeats = _scaling_points(rs)
        eff = [100.0 * s / sps[0] for s in sps]
        label = _scaling_label(dict(zip(SCALING_KEYS, k)), vary, rs, ws[0])
        if repeats > 1:
            label += "\n(points: mean of up to %d runs)" % repeats
        m = markers[i % len(markers)]
        ax1.plot(ws, sps, marker=m, linewidth=1.8, markersize=7, label=label)
        ax2.plot(ws, eff, marker=m, linewidth=1.8, markersize=7, label=label)
        for w, s in zip(ws, sps):
            ax1.annotate("%.2f" % s, (w, s), textcoords="offset points", xytext=(0, 8), ha="center", fontsize=9)
        for w, e in zip(ws, eff):
            ax2.annotate("%.1f%%" % e, (w, e), textcoords="offset points", xytext=(0, 8), ha="center", fontsize=9)
    _scaling_axes(ax1, ax2, all_ws)
    common = _cfg(runs[0])
    fixed = [common[x] for x in ("model", "backend", "precision", "batch") if x not in vary]
    fig.suptitle("Weak scaling (batch per rank fixed)" + (": " + ", ".join(fixed) if fixed else ""),
                 fontsize=13)
    legend_outside(ax2, title="configuration")
    fig.tight_layout()
    save(fig, a.output, a.format)
    return 0


# ----------------------------------------------------------------------------------------- eval

def cmd_eval(a):
    """`eval`: test accuracy and mean cross-entropy against optimizer step, one line per file."""
    output_paths(a.output, a.format)  # fail on a bad -o before reading anything
    runs = open_runs(a.files)
    curves = []
    for r in runs:
        e = r.eval_series()
        curves.append((r, e["step"], e["accuracy"], e["loss"], e["samples"]))
    fig, (ax_acc, ax_loss) = plt.subplots(1, 2, figsize=(12, 4.8))
    for r, step, acc, loss, samples in curves:
        label = "%s (%s, %d rank%s, lr %s)" % (r.label, r.model, r.world_size, "" if r.world_size == 1 else "s",
                                                _text(r.attr("option.lr", "?")))
        line, = ax_acc.plot(step, 100 * acc, marker="o", linewidth=1.8, markersize=5, label=label)
        ax_acc.annotate("%.2f%%" % (100 * acc[-1]), (step[-1], 100 * acc[-1]), textcoords="offset points",
                        xytext=(0, 8), ha="center", fontsize=9, color=line.get_color())
        ax_loss.plot(step, loss, marker="o", linewidth=1.8, markersize=5, color=line.get_color(), label=label)
    n = sorted({int(x) for _, _, _, _, s in curves for x in s})
    split = _text(curves[0][0].attr("option.eval-split", "test"))
    ax_acc.set_title("top-1 accuracy on the %s split (%s images)" % (split, "/".join(str(x) for x in n)))
    ax_acc.set_xlabel("after step (0-based, as vitddp prints it)")
    ax_acc.set_ylabel("top-1 accuracy (%)")
    ax_loss.set_title("mean cross-entropy on the %s split" % split)
    ax_loss.set_xlabel("after step (0-based, as vitddp prints it)")
    ax_loss.set_ylabel("loss (nats)")
    for ax in (ax_acc, ax_loss):
        ax.grid(True, color="#DDDDDD", linewidth=0.6)
    if a.target is not None:
        ax_acc.axhline(a.target, color="#888888", linestyle="--", linewidth=1.0)
        ax_acc.annotate("%g%%" % a.target, (ax_acc.get_xlim()[0], a.target), textcoords="offset points",
                        xytext=(4, 4), fontsize=9, color="#666666")
    ax_loss.legend(loc="upper right", frameon=False, fontsize=8)
    fig.tight_layout()
    save(fig, a.output, a.format)
    return 0


# ----------------------------------------------------------------------------------------- busbw

def _fmt_bytes(x, _pos=None):
    """Tick label for a message size in bytes (powers of 1024: KiB, MiB, GiB)."""
    for unit, div in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if x >= div:
            return "%g %s" % (round(x / div, 2), unit)
    return "%g B" % x


def cmd_busbw(a):
    """`busbw`: per bucket, the median busbw of the timed steps against the bucket's bytes on the
    wire (log x), every timed step as a faint point, the run's byte-weighted median as a dashed
    line, and the file's link probe curve (group link_probe) when it has one."""
    output_paths(a.output, a.format)  # fail on a bad -o before reading anything
    runs = open_runs(a.files)
    extra_probe = read_probe(a.probe) if a.probe else None
    data = []
    for r in runs:
        bw = BucketBandwidth(r)
        if bw.busbw is None:
            raise PlotError("%s: one rank: no bus bandwidth (busbw = algbw x 2(n-1)/n is 0)" % r.path)
        data.append((r, bw, bw.per_bucket(), link_probe(r)))
    fig, ax = plt.subplots(figsize=(9.0, 5.4))
    markers = "osD^vP*X"
    for i, (r, bw, pb, probe) in enumerate(data):
        lane = "/".join(sorted(set(comm_name(r, k) for k in range(r.world_size))))
        label = ("%s (%s, %d ranks)" % (r.label, lane, r.world_size) if len(runs) > 1
                 else "buckets (median of %d timed steps)" % int(bw.timed.sum()))
        sel = bw.timed
        x_all, y_all = bw.nbytes[sel].reshape(-1), bw.busbw[sel].reshape(-1)
        ok = np.isfinite(y_all) & (x_all > 0)
        pts = ax.plot(x_all[ok], y_all[ok], marker=".", linestyle="none", alpha=0.25, markersize=4)
        color = pts[0].get_color()
        ok = np.isfinite(pb["busbw"]) & (pb["nbytes"] > 0)
        ax.plot(pb["nbytes"][ok], pb["busbw"][ok], marker=markers[i % len(markers)], linestyle="none",
                markersize=7, color=color, markeredgecolor="black", markeredgewidth=0.5, label=label)
        med = bw.median_busbw()
        if med is not None:
            ax.axhline(med, color=color, linestyle="--", linewidth=1.2,
                       label="%sall buckets of a step together: median %.1f GB/s" % (
                           r.label + ", " if len(runs) > 1 else "", med))
        if probe is not None:
            order = np.argsort(probe[0])
            ax.plot(probe[0][order], probe[1][order], color=color, linewidth=1.6, marker="x",
                    label="%slink probe (all-reduce of one message)" % (r.label + ", " if len(runs) > 1 else ""))
    if extra_probe is not None:
        ax.plot(extra_probe[0], extra_probe[1], color="black", linewidth=1.6, marker="+",
                label="link probe %s (all-reduce of one message)" % os.path.basename(a.probe))
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(_fmt_bytes))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("bytes on the wire per all-reduce (buckets/bytes_sent, log scale)")
    ax.set_ylabel("busbw (GB/s = 1e9 bytes/s)")
    ax.set_ylim(bottom=0, top=ax.get_ylim()[1] * 1.1)
    ax.grid(True, which="major", color="#DDDDDD", linewidth=0.6)
    r0 = runs[0]
    if len(runs) == 1:
        tr = "/".join(sorted(set(comm_name(r0, k) for k in range(r0.world_size))))
        ax.set_title("All-reduce bus bandwidth per bucket (%s, %d ranks)\n%s" % (tr, r0.world_size, r0.config_text()))
    else:
        common = [v for v in (sorted({r.model for r in runs}), sorted({r.backend.upper() for r in runs}))
                  if len(v) == 1]
        ax.set_title("All-reduce bus bandwidth per bucket, %d files%s" % (
            len(runs), (" (" + ", ".join(v[0] for v in common) + ")") if common else ""))
    ax.annotate("busbw = bytes / time x 2(n-1)/n (nccl-tests); time: buckets/allreduce_time, mean of the ranks "
                "(a rank that arrives first also waits inside the call)",
                xy=(0, 0), xycoords="axes fraction", xytext=(0, -0.16), textcoords="axes fraction",
                ha="left", va="top", fontsize=8.5, color="#444444")
    legend_outside(ax)
    save(fig, a.output, a.format)
    return 0


# ----------------------------------------------------------------------------------------- CLI

def build_parser(prog="vitddp-plot"):
    """The argparse parser with one sub-parser per subcommand."""
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0],
                                epilog="Each subcommand has its own --help. Exit status: 0 ok, 2 error.")
    sub = p.add_subparsers(dest="command", metavar="SUBCOMMAND")
    sub.required = True

    def plot_args(sp):
        """Adds -o/--output and --format to a plotting sub-parser."""
        sp.add_argument("-o", "--output", required=True, metavar="OUT",
                        help="output file; .png or .svg picks the format (with --format both: both)")
        sp.add_argument("--format", choices=["png", "svg", "both"],
                        help="output format(s); default: from the -o extension")

    s = sub.add_parser("summary", help="results table (Markdown) of one or many files",
                       description="Prints the results table in Markdown: configuration (model, world size, "
                       "backend, precision, bucket cap, compression = attribute option.compression or none, "
                       "overlap, ddp), steps/s per rank (summary/steps_per_second), images/s of all ranks, "
                       "TFLOP/s per rank, median device step time, exposed communication (mean of "
                       "timing/exposed_comm over the timed steps, rank 0 and the largest rank), and the "
                       "speed-up in images/s (all ranks) against the first file or --baseline.")
    s.add_argument("files", nargs="+", metavar="FILE", help="vitddp results files (.h5)")
    s.add_argument("--baseline", metavar="FILE", help="file the speed-up is relative to (default: the first FILE)")
    s.add_argument("-o", "--output", metavar="OUT.md", help="also write the table to this file")
    s.add_argument("--no-notes", action="store_true", help="only the table, without the note on the columns")
    s.set_defaults(func=cmd_summary)

    s = sub.add_parser("phases", help="stacked bars per rank: mean phase times of the timed steps",
                       description="Stacked bars, one per rank (and file): mean over the timed steps "
                       "(steps/timed == 1) of data wait, forward, backward, exposed comm and optimizer, in ms, "
                       "with the exact values in a table under the bars.")
    s.add_argument("files", nargs="+", metavar="FILE", help="vitddp results file(s)")
    plot_args(s)
    s.set_defaults(func=cmd_phases)

    s = sub.add_parser("timeline", help="compute and comm streams per rank against time (as nsys shows them)",
                       description="Per rank, the compute stream (input wait, forward, backward, exposed comm, "
                       "optimizer, from the cumulative event times) and the comm stream (one bar per bucket, "
                       "buckets/allreduce_start to allreduce_end, labelled with the bucket index) as horizontal "
                       "bars against ms since the start of the first chosen step. Several steps are drawn one "
                       "after the other, each from the end of the previous one on that rank.")
    s.add_argument("file", metavar="FILE", help="vitddp results file")
    s.add_argument("--steps", metavar="LIST",
                   help="steps as vitddp numbers them (from 0; a resumed run's file starts at resumed_from_step), "
                   "e.g. 10,11 or 10-12 (default: the first two timed steps)")
    s.add_argument("--xlim", metavar="FROM,TO", help="zoom: time range to show, in ms (e.g. 70,76)")
    s.add_argument("--width", type=float, default=15.0, help="figure width in inches [15]")
    plot_args(s)
    s.set_defaults(func=cmd_timeline)

    s = sub.add_parser("sweep", help="steps/s per rank against bucket size, one line per compression",
                       description="Throughput (summary/steps_per_second, per rank) against bucket size "
                       "(option.bucket-cap-mb, log x axis), one line per compression (option.compression or "
                       "none); when precision, world size, model, backend, overlap or batch size also differ "
                       "between the files, they split the lines too. Files of runs without DDP are ignored.")
    s.add_argument("files", nargs="+", metavar="FILE", help="vitddp results files of the sweep")
    plot_args(s)
    s.set_defaults(func=cmd_sweep)

    s = sub.add_parser("scaling", help="steps/s per rank and scaling efficiency against number of GPUs",
                       description="Throughput per rank (summary/steps_per_second) and scaling efficiency "
                       "(per-rank throughput / the 1-rank figure of the same configuration, in %) against "
                       "world_size, one line per configuration (model, backend, precision, batch, bucket cap, "
                       "compression, overlap); runs of one configuration and world size are averaged (the legend "
                       "says so). A 1-rank run without DDP serves as the 1-rank figure of every line of its "
                       "model/backend/precision/batch that has none of its own; a line without any 1-rank run is "
                       "relative to its smallest world size (said in the legend).")
    s.add_argument("files", nargs="+", metavar="FILE", help="vitddp results files")
    plot_args(s)
    s.set_defaults(func=cmd_scaling)

    s = sub.add_parser("eval", help="test accuracy and loss against optimizer step (--eval-every runs)",
                       description="Top-1 accuracy (eval/accuracy, in %) and mean cross-entropy (eval/loss) "
                       "against the step after which each evaluation ran (eval/step, 0-based as vitddp prints "
                       "it), one line per file, the "
                       "final accuracy written next to its point.")
    s.add_argument("files", nargs="+", metavar="FILE", help="vitddp results files with eval/* series")
    s.add_argument("--target", type=float, metavar="PERCENT", help="draw a dashed line at this accuracy (e.g. 88)")
    plot_args(s)
    s.set_defaults(func=cmd_eval)

    s = sub.add_parser("busbw", help="all-reduce bus bandwidth per bucket against bucket size (nccl-tests' busbw)",
                       description="Per bucket, the median over the timed steps of busbw = bytes / time x 2(n-1)/n "
                       "(nccl-tests, doc/PERFORMANCE.md; GB/s = 1e9 bytes/s) against the bucket's bytes on the "
                       "wire (buckets/bytes_sent: a 16-bit compressed bucket counts its 16-bit payload), time = "
                       "buckets/allreduce_time averaged over the ranks; every timed step as a faint point; the "
                       "byte-weighted median of the steps (all buckets of a step together) as a dashed line; and "
                       "the file's link probe (link_probe/bytes with link_probe/busbw or link_probe/time) as a curve "
                       "when it has one. Needs 2 or more ranks and per-bucket all-reduce times.")
    s.add_argument("files", nargs="+", metavar="FILE", help="vitddp results file(s) of DDP runs")
    s.add_argument("--probe", metavar="FILE", help="also draw this vitddp-probe file's all-reduce busbw curve "
                   "(link_probe/allreduce/busbw against link_probe/bytes)")
    plot_args(s)
    s.set_defaults(func=cmd_busbw)
    return p


def main(argv=None, prog="vitddp-plot"):
    """Entry point (console script vitddp-plot): runs the subcommand; returns the exit status
    (2 on errors, with one line)."""
    args = build_parser(prog).parse_args(argv)
    name = prog[:-3] if prog.endswith(".py") else prog

    def body():
        if hasattr(args, "output"):
            check_outputs(args, {"output": "-o"})
        return args.func(args)
    return run_command(name, body)


if __name__ == "__main__":
    sys.exit(main())
