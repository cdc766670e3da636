"""`vitddp-report losses`: whether two vitddp runs trained alike.

The largest |difference| of their training/loss datasets (float64 [world size, steps]: the loss of
every step on every rank, as vitddp writes it).

    vitddp-report losses REF OTHER [REF OTHER ...]   (HDF5 files written by vitddp --out)

Prints one line per pair: "identical" (bit for bit, NaN where the other has NaN) or the largest
absolute difference; a pair with different shapes or no steps is reported as such. Exit status 0 (a
report, not a test); 2 with one line for an odd or empty argument list, or a file that is missing
or is not a vitddp results file with training/loss (checked before any line is printed).
"""
import os
import sys

import numpy as np

from .reader import ResultsError, Run


def read_losses(path):
    """training/loss of results file `path` (float64 [ranks, steps]); ResultsError naming the file
    when it is missing or cannot be read as a vitddp results file with that dataset."""
    if not os.path.exists(path):
        raise ResultsError("%s: no such file" % path)
    try:
        with Run(path) as r:
            return r.step_series("training/loss")
    except ResultsError as e:
        raise ResultsError("%s: cannot read training/loss (%s)" % (path, e))


def compare_pair(ref, other, x, y):
    """The report line (str) of files `ref` and `other`, whose training/loss are `x` and `y`."""
    name = f"{os.path.basename(ref)} vs {os.path.basename(other)}"
    if x.shape != y.shape:
        return f"{name}: different shapes {x.shape} and {y.shape}"
    if x.size == 0:
        return f"{name}: no steps"
    if np.array_equal(x, y, equal_nan=True):
        return f"{name}: identical"
    return f"{name}: max |loss difference| {float(np.nanmax(np.abs(x - y))):.3g}"


def main(argv=None, prog="vitddp-report losses"):
    """Prints one line per pair of files in `argv`; returns 0 (ResultsError for bad arguments or files)."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] in (["-h"], ["--help"]):
        print(f"usage: {prog} REF OTHER [REF OTHER ...]")
        return 0
    if not args or len(args) % 2:
        raise ResultsError(f"give files in pairs: REF OTHER [REF OTHER ...] (got {len(args)})")
    series = {p: read_losses(p) for p in args}  # every file checked before any line
    for ref, other in zip(args[::2], args[1::2]):
        print(compare_pair(ref, other, series[ref], series[other]))
    return 0
