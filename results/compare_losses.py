#!/usr/bin/env python3
"""Whether two vitddp runs trained alike: the largest |difference| of their training/loss datasets
(shape (world size, steps), float64; the loss of every step on every rank, as vitddp writes it).

Usage: compare_losses.py REF OTHER [REF OTHER ...]   (HDF5 files written by vitddp --out)
Prints one line per pair: "identical" (bit for bit, NaN where the other has NaN) or the largest
absolute difference; a pair with a missing file, different shapes or no steps is reported as such.
Exit status 0 (a report, not a test); 1 with a usage message for an odd or empty argument list.
"""
import os
import sys

try:
    import h5py
    import numpy as np
except ImportError as _e:  # depends on the machine
    sys.exit(f"compare_losses: error: {_e} (install python3-h5py and python3-numpy, or pip install h5py numpy)")


def main() -> None:
    args = sys.argv[1:]
    if not args or len(args) % 2:
        sys.exit("usage: compare_losses.py REF OTHER [REF OTHER ...]")
    for ref, other in zip(args[::2], args[1::2]):
        name = f"{os.path.basename(ref)} vs {os.path.basename(other)}"
        if not (os.path.exists(ref) and os.path.exists(other)):
            print(f"{name}: missing file")
            continue
        try:
            with h5py.File(ref, "r") as a, h5py.File(other, "r") as b:
                x, y = a["training/loss"][()], b["training/loss"][()]
        except (OSError, KeyError) as e:
            print(f"{name}: cannot read training/loss ({e})")
            continue
        if x.shape != y.shape:
            print(f"{name}: different shapes {x.shape} and {y.shape}")
            continue
        if x.size == 0:
            print(f"{name}: no steps")
        elif np.array_equal(x, y, equal_nan=True):
            print(f"{name}: identical")
        else:
            print(f"{name}: max |loss difference| {float(np.nanmax(np.abs(x - y))):.3g}")


if __name__ == "__main__":
    main()
