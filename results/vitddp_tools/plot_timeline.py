"""vitddp-plot timeline: one run's compute stream and comm stream per rank against time, as nsys
draws them (the phases of the chosen steps, each bucket's all-reduce, the end of backward compute).
"""
from types import SimpleNamespace

import numpy as np

from .plot_style import (BUCKET_COLORS, COLORS, HATCH, PHASE_LABELS, PlotError, comm_name, output_paths, plt,
                         save)
from .reader import Run


def parse_steps(text, nsteps, path, first=0):
    """Parses --steps ('10,11' or '10-12': step numbers as vitddp prints them, 0-based from the
    run's first step; docs/schema.md, Step numbering) into a sorted list of recorded step indices
    (the file's step axis, which starts at step `first` = resumed_from_step)."""
    out = []
    try:
        for part in text.split(","):
            part = part.strip()
            if "-" in part:
                lo, hi = part.split("-", 1)
                out.extend(range(int(lo), int(hi) + 1))
            elif part:
                out.append(int(part))
    except ValueError:
        raise PlotError("--steps: expected step numbers such as 10,11 or 10-12, got '%s'" % text)
    if not out:
        raise PlotError("--steps: no step given")
    bad = [s for s in out if s < first or s >= first + nsteps]
    if bad:
        raise PlotError("--steps: step %d is not in %s (recorded steps %d..%d)" % (bad[0], path, first,
                                                                                   first + nsteps - 1))
    return sorted({s - first for s in out})


def _pt_per_ms(ax, fig):
    """Points per millisecond along the x axis of `ax` as drawn."""
    fig.canvas.draw()
    x0, x1 = ax.get_xlim()
    return ax.get_window_extent().width / (x1 - x0) * 72.0 / fig.dpi


def _bucket_labels(ax, fig, segs, y_above, y_below, fontsize=7.5):
    """Writes each bucket's index at its bar: even buckets on a row above the bars, odd ones below,
    skipping a label only where it would overlap the previous one of its row (the last bucket of a
    step always keeps its label)."""
    pt_per_ms = _pt_per_ms(ax, fig)
    placed = {0: [], 1: []}  # per row: (centre, text artist)
    last_b = max((seg[2] for seg in segs), default=-1)
    for start, w, b, _sub in segs:
        row = b % 2
        centre = start + w / 2
        text = "%d" % b
        need_ms = (0.62 * fontsize * len(text) + 2.0) / pt_per_ms
        if placed[row] and centre - placed[row][-1][0] < need_ms:
            if b != last_b:
                continue
            placed[row].pop()[1].remove()
        art = ax.text(centre, y_above if row == 0 else y_below, text, ha="center", va="center",
                      fontsize=fontsize, color="#7A3700", clip_on=True)
        placed[row].append((centre, art))


def _sublane_labels(ax, fig, segs, y_of_sub, fontsize=6.5):
    """Labels overlapping all-reduces (drawn in sub-rows): the index inside each bar at its start
    where it fits, else just left of it; skipped where it would overlap the previous label of the
    same sub-row."""
    pt_per_ms = _pt_per_ms(ax, fig)
    last = {}
    for start, w, b, sub in segs:
        text = "%d" % b
        need_ms = (0.62 * fontsize * len(text) + 3.0) / pt_per_ms
        if start - last.get(sub, -np.inf) < need_ms:
            continue
        last[sub] = start
        inside = w >= need_ms
        ax.text(start + (2.0 if inside else -1.0) / pt_per_ms, y_of_sub(sub), text,
                ha="left" if inside else "right", va="center", fontsize=fontsize,
                color="black" if inside else "#7A3700", clip_on=True)


def _assign_sublanes(intervals):
    """Greedy interval packing: for (start, end) pairs in start order, the lowest sub-row whose
    previous interval has ended. Returns the sub-row of each interval."""
    ends, rows = [], []
    for st, en in intervals:
        for j, e in enumerate(ends):
            if e <= st + 1e-9:
                ends[j] = en
                rows.append(j)
                break
        else:
            ends.append(en)
            rows.append(len(ends) - 1)
    return rows


PHASES = ("input_wait", "forward", "backward", "exposed_comm", "optimizer")  # a step's compute-stream phases
LANE_H, GAP, SUB_H = 0.8, 0.5, 0.16  # heights (axis units): a compute lane, between ranks, a comm sub-row


def _timeline_data(a):
    """What the plot reads from the file of `a.file` (vitddp's timing/ and buckets/ datasets, ms):
    the phases per rank and step, each bucket's all-reduce start and end, the chosen steps (step
    indices of the file), and, in newer files, backward's end and each step's start."""
    run = Run(a.file)
    t = {k: run.series_ms("timing/" + k) for k in PHASES + ("step_time",)}
    ends = run.series_ms("buckets/allreduce_end")
    nsteps = t["forward"].shape[1]
    first = int(run.attr("resumed_from_step", 0))  # step number of the file's step index 0
    if a.steps:
        steps = parse_steps(a.steps, nsteps, a.file, first)
    else:  # default: the first two timed steps
        steps = [int(s) for s in np.nonzero(run.timed())[0][:2]]
    return SimpleNamespace(
        run=run, t=t, starts=run.series_ms("buckets/allreduce_start"), ends=ends, steps=steps, first=first,
        R=run.world_size, has_comm=run.ddp and bool(np.any(ends[:, steps, :] > 0)),
        # timing/backward_end (newer files): the end of backward compute, to compare with all-reduce starts
        bwd_end=run.series_ms("timing/backward_end") if "timing/backward_end" in run.f else None,
        # timing/step_start (newer files): the step-start events on the rank's device clock, gaps
        # between steps included; else each step is drawn from the end of the previous one.
        step_start=run.series_ms("timing/step_start") if "timing/step_start" in run.f else None)


def _comm_segments(d):
    """(offsets [R, steps] ms, segments per rank, sub-rows): where each chosen step starts from the
    first one's start, and each bucket all-reduce as [start, width, bucket, sub-row], with sub-rows
    where all-reduces overlap (MPI_Iallreduce on the CPU backend; NCCL's comm stream runs them in order)."""
    comm = []
    offsets = np.zeros((d.R, len(d.steps)))
    for r in range(d.R):
        if d.step_start is not None:
            offs = np.array([d.step_start[r, s] - d.step_start[r, d.steps[0]] for s in d.steps])
        else:
            offs = np.concatenate([[0.0], np.cumsum([d.t["step_time"][r, s] for s in d.steps])[:-1]])
        offsets[r] = offs
        segs = []
        for off, s in zip(offs, d.steps):
            for b in range(d.starts.shape[2]):
                st, en = d.starts[r, s, b], d.ends[r, s, b]
                if d.has_comm and not (st <= 0 and en <= 0):
                    segs.append([off + st, max(en - st, 1e-6), b, 0])
        for seg, sub in zip(segs, _assign_sublanes([(x[0], x[0] + x[1]) for x in segs])):
            seg[3] = sub
        comm.append(segs)
    return offsets, comm, max([1] + [seg[3] + 1 for segs in comm for seg in segs])


def _draw_streams(ax, d, offsets, comm, nsub, comm_h, block):
    """Draws each rank's compute lane and comm lane; returns (y ticks, their labels, the step starts
    to mark, per rank (segments, comm lane's y, sub-row centre function or None) for the labels)."""
    yticks, ylabels, step_marks, lanes = [], [], [], []
    for r in range(d.R):
        y_comm = (d.R - 1 - r) * block
        y_comp = y_comm + comm_h
        for off, s in zip(offsets[r], d.steps):
            cursor = off
            for p in PHASES:
                w = d.t[p][r, s]
                if w > 0:
                    ax.broken_barh([(cursor, w)], (y_comp + 0.08, LANE_H - 0.16), facecolors=COLORS[p],
                                   edgecolor="black", linewidth=0.4, hatch=HATCH.get(p))
                cursor += w
            if r == 0:
                step_marks.append((off, s))
        yticks.append(y_comp + LANE_H / 2)
        ylabels.append("rank %d compute" % r)
        if d.has_comm:
            y_of_sub = None
            if nsub == 1:
                bar_y, bar_h = y_comm + 0.25, LANE_H - 0.5
            else:
                def y_of_sub(j, base=y_comm):
                    """Centre of sub-row j (0 = top) of this rank's comm lane."""
                    return base + 0.1 + (nsub - 1 - j) * SUB_H + SUB_H / 2
            for start, w, b, sub in comm[r]:
                if nsub > 1:
                    bar_y, bar_h = y_of_sub(sub) - SUB_H * 0.4, SUB_H * 0.8
                ax.broken_barh([(start, w)], (bar_y, bar_h), facecolors=BUCKET_COLORS[b % 2], edgecolor="black",
                               linewidth=0.3)
            if d.bwd_end is not None:  # where backward compute ended: all-reduces after it are exposed
                lo, hi = (0.2, LANE_H - 0.2) if nsub == 1 else (0.03, comm_h - 0.03)
                for off, s in zip(offsets[r], d.steps):
                    ax.plot([off + d.bwd_end[r, s]] * 2, [y_comm + lo, y_comm + hi], color="black",
                            linewidth=1.4, solid_capstyle="butt")
            lanes.append((comm[r], y_comm, y_of_sub))
            yticks.append(y_comm + comm_h / 2)
            ylabels.append("rank %d comm (%s)" % (r, comm_name(d.run, r)))
    return yticks, ylabels, step_marks, lanes


def _set_time_axis(ax, a, d, offsets, block, step_marks):
    """x limits (the chosen steps, or --xlim), the step marks, the axis labels and the title."""
    total = max(offsets[r, -1] + d.t["step_time"][r, d.steps[-1]] for r in range(d.R))
    ax.set_xlim(0, total * 1.01)
    if a.xlim:
        try:
            lo, hi = (float(v) for v in a.xlim.split(","))
        except ValueError:
            raise PlotError("--xlim: expected two numbers in ms such as 60,80, got '%s'" % a.xlim)
        if not hi > lo:
            raise PlotError("--xlim: the end must be after the start, got '%s'" % a.xlim)
        ax.set_xlim(lo, hi)
    span = ax.get_xlim()[1] - ax.get_xlim()[0]
    ymax = d.R * block - GAP
    ax.set_ylim(-0.1, ymax + 0.45)
    for x0, s in step_marks:
        ax.axvline(x0, color="#555555", linestyle=":", linewidth=1.0)
        ax.text(x0 + 0.004 * span, ymax + 0.08, "Batch %d" % (d.first + s), fontsize=10, va="bottom", ha="left",
                color="#333333", clip_on=True)
    if d.step_start is not None or len(d.steps) == 1:
        ax.set_xlabel("time since the start of step %d on each rank (ms)" % (d.first + d.steps[0]))
    else:
        ax.set_xlabel("time since the start of step %d on each rank (ms; each further step drawn from the "
                      "end of the previous one)" % (d.first + d.steps[0]))
    ax.grid(axis="x", color="#DDDDDD", linewidth=0.6)
    ax.set_axisbelow(True)
    ax.spines["left"].set_visible(False)
    ax.set_title("Compute and communication streams, step%s %s\n%s" % (
        "s" if len(d.steps) > 1 else "", ", ".join(str(d.first + s) for s in d.steps), d.run.config_text()))


def _legend(ax, d, nsub):
    """The phases' colours, the all-reduce bars and the end-of-backward mark, outside the axes."""
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor=COLORS[p], edgecolor="black", linewidth=0.4,
                             hatch=HATCH.get(p)) for p in PHASES]
    labels = [PHASE_LABELS[p] for p in PHASES]
    if d.has_comm:
        handles.append(plt.Rectangle((0, 0), 1, 1, facecolor=BUCKET_COLORS[0], edgecolor="black", linewidth=0.3))
        labels.append("all-reduce of bucket k\n" + ("(k: even above, odd below)" if nsub == 1
                                                    else "(label k; overlapping ones\nin sub-rows)"))
        if d.bwd_end is not None:
            handles.append(plt.Line2D([0], [0], color="black", linewidth=1.4))
            labels.append("end of backward compute")
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False)


def cmd_timeline(a):
    """`timeline`: per rank, the compute stream's phases and the comm stream's bucket all-reduces."""
    output_paths(a.output, a.format)  # fail on a bad -o before reading anything
    d = _timeline_data(a)
    offsets, comm, nsub = _comm_segments(d)
    comm_h = (LANE_H if nsub == 1 else 0.2 + SUB_H * nsub) if d.has_comm else 0.0
    block = LANE_H + comm_h + GAP
    fig, ax = plt.subplots(figsize=(a.width, max(3.2, 1.9 + d.R * block * 0.75)))
    yticks, ylabels, step_marks, lanes = _draw_streams(ax, d, offsets, comm, nsub, comm_h, block)
    ax.set_yticks(yticks)
    ax.set_yticklabels(ylabels)
    ax.tick_params(axis="y", length=0)
    _set_time_axis(ax, a, d, offsets, block, step_marks)
    _legend(ax, d, nsub)
    if d.has_comm:  # labels last: their placement needs the finished axes
        for segs, y_comm, y_of_sub in lanes:
            if nsub == 1:
                _bucket_labels(ax, fig, segs, y_comm + LANE_H - 0.13, y_comm + 0.13)
            else:
                _sublane_labels(ax, fig, segs, y_of_sub)
    else:
        ax.annotate("no all-reduce (run without DDP)" if not d.run.ddp else "no bucket times recorded",
                    xy=(0.5, -0.28), xycoords="axes fraction", ha="center", fontsize=10, color="#444444")
    save(fig, a.output, a.format)
    return 0
