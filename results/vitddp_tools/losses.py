"""`vitddp-report losses`: whether two vitddp runs trained alike.

The largest |difference| of their training/loss datasets (float64 [world size, steps]: the loss of
every step on every rank, as vitddp writes it).

    vitddp-report losses REF OTHER [REF OTHER ...]   (HDF5 files written by vitddp --out)

Prints one line per pair: "identical" (bit for bit, NaN where the other has NaN) or the largest
absolute difference; a pair with a missing file, different shapes or no steps is reported as such.
Exit status 0 (a report, not a test); 1 with a usage message for an odd or empty argument list.
"""
import os
import sys

import numpy as np

from .reader import ResultsError, Run


def compare_pair(ref, other):
    """The report line of one pair of files (str)."""
    name = f"{os.path.basename(ref)} vs {os.path.basename(other)}"
    if not (os.path.exists(ref) and os.path.exists(other)):
        return f"{name}: missing file"
    try:
        with Run(ref) as a, Run(other) as b:
            x, y = a.step_series("training/loss"), b.step_series("training/loss")
    except ResultsError as e:
        return f"{name}: cannot read training/loss ({e})"
    if x.shape != y.shape:
        return f"{name}: different shapes {x.shape} and {y.shape}"
    if x.size == 0:
        return f"{name}: no steps"
    if np.array_equal(x, y, equal_nan=True):
        return f"{name}: identical"
    return f"{name}: max |loss difference| {float(np.nanmax(np.abs(x - y))):.3g}"


def main(argv=None, prog="vitddp-report losses"):
    """Prints one line per pair of files in `argv`; returns 0, or 1 with a usage line."""
    args = sys.argv[1:] if argv is None else list(argv)
    if not args or len(args) % 2 or args[0] in ("-h", "--help"):
        print(f"usage: {prog} REF OTHER [REF OTHER ...]", file=sys.stderr)
        return 0 if args[:1] in (["-h"], ["--help"]) else 1
    for ref, other in zip(args[::2], args[1::2]):
        print(compare_pair(ref, other))
    return 0
