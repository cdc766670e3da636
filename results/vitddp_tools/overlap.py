"""`vitddp-report overlap`: overlap table of vitddp results files.

Per run: steps/s per GPU, the share of a 1-GPU baseline, and the medians over rank 0's timed steps
of forward, backward (compute; the all-reduces overlap it), exposed communication, the comm
streams' busy time (all-reduce + compression, summed over the buckets: with several comm streams,
--comm-streams, it counts overlapping buckets twice) and the time some bucket's communication is
in flight (the union of the buckets' [allreduce_start, allreduce_end] intervals; with one comm
stream close to the busy time).

    vitddp-report overlap [--baseline ONE_GPU.h5] FILE.h5...   (prints a Markdown table)

Column definitions: docs/schema.md (timing/*, buckets/allreduce_time, buckets/compress_time).
"""
import argparse
import os

import numpy as np

from .reader import open_runs


def row(run):
    """The figures of one run (dict: sps steps/s, world ranks, fwd/bwd/exposed/busy/active ms)."""
    timed = run.timed()

    def med(name):
        """Median over rank 0's timed steps of series `name`, in ms."""
        return 1e3 * float(np.median(run.step_series(name)[0][timed]))
    busy = active = 0.0
    if run.has("buckets/allreduce_time") and run.f["buckets/allreduce_time"].shape[-1] > 0:
        per_step = run.bucket_series("buckets/allreduce_time")[0][timed].sum(axis=1)
        per_step = per_step + run.bucket_series("buckets/compress_time")[0][timed].sum(axis=1)
        busy = 1e3 * float(np.median(per_step))
        starts = run.bucket_series("buckets/allreduce_start")[0][timed]
        ends = run.bucket_series("buckets/allreduce_end")[0][timed]
        active = 1e3 * float(np.median([union_length(s, e) for s, e in zip(starts, ends)]))
    return dict(sps=run.summary("steps_per_second"), world=int(run.attr("world_size", 1)),
                fwd=med("timing/forward"), bwd=med("timing/backward"),
                exposed=med("timing/exposed_comm"), busy=busy, active=active)


def union_length(starts, ends):
    """Length of the union of the intervals [starts[i], ends[i]] (seconds; empty ones skipped)."""
    total, reach = 0.0, -np.inf
    for s, e in sorted((s, e) for s, e in zip(starts, ends) if e > s):
        if e > reach:
            total += e - max(s, reach)
            reach = e
    return total


def main(argv=None, prog="vitddp-report overlap"):
    """Prints the overlap table of the files in `argv`; returns 0 (ResultsError on a bad file)."""
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", help="1-GPU results file whose steps/s is 100%%")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args(argv)
    runs = open_runs(([a.baseline] if a.baseline else []) + a.files)
    base = row(runs.pop(0))["sps"] if a.baseline else None
    print("| run | ranks | steps/s per GPU | share of 1 GPU | forward ms | backward ms | exposed comm ms | comm busy ms "
          "| comm in flight ms |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for path, run in zip(a.files, runs):
        r = row(run)
        share = f"{100 * r['sps'] / base:.1f}%" if base else "-"
        print(f"| {os.path.basename(path)[:-3]} | {r['world']} | {r['sps']:.2f} | {share} | {r['fwd']:.2f} | "
              f"{r['bwd']:.2f} | {r['exposed']:.2f} | {r['busy']:.2f} | {r['active']:.2f} |")
    return 0
