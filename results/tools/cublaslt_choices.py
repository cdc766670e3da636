#!/usr/bin/env python3
"""Which cuBLASLt algorithm each GEMM shape ended with, in one or more logs, side by side.

    CUBLASLT_LOG_LEVEL=2 CUBLASLT_LOG_FILE=plain.log build/vitddp ...
    CUBLASLT_LOG_LEVEL=2 CUBLASLT_LOG_FILE=ncu.log ncu ... build/vitddp ...
    python3 results/tools/cublaslt_choices.py plain.log ncu.log [--all]

Reads cuBLASLt's trace (log level 2, or mask 2: one line per cublasLtMatmul call with its
descriptors and `algo=[...]`; files may be .xz). A GEMM is the tuple of its A, B and D descriptors
(type, rows, columns, leading dimension), its compute descriptor without pointers (compute type,
transposes, epilogue) and beta's value; what it ended with is the algorithm of its last call in the
file. vitddp times its autotuning candidates in its first forward and backward, so the last call is
the choice the steps ran (a profiler process that ran them differently shows up as a different choice).

Prints, per GEMM (D's rows x columns, then its descriptors), "same" or "differs" and each file's
algorithm when they differ (--all: always), then a count. Exit 0; 2 when a file cannot be read or
holds no cublasLtMatmul line.
"""
import argparse
import lzma
import re
import sys

_DESC = {name: re.compile(name + r"=\[([^\]]*)\]") for name in ("Adesc", "Bdesc", "Ddesc", "computeDesc", "algo")}
_POINTERS = re.compile(r"\s*\w*(?:Pointer|pointer)=\S+")
_BETA = re.compile(r"\sbeta=(\S+)")


def gemm_key(line):
    """(Adesc, Bdesc, Ddesc, computeDesc without pointers, beta) of one cublasLtMatmul line, or None."""
    found = {name: rx.search(line) for name, rx in _DESC.items()}
    if "[cublasLtMatmul]" not in line or not all(found.values()):
        return None
    compute = _POINTERS.sub("", found["computeDesc"].group(1)).strip()
    beta = _BETA.search(line)
    return (found["Adesc"].group(1), found["Bdesc"].group(1), found["Ddesc"].group(1), compute,
            beta.group(1) if beta else "")


def choices(path):
    """{gemm key: the algo=[...] text of its last call} of one log."""
    opener = lzma.open if path.endswith(".xz") else open
    last = {}
    with opener(path, "rt", errors="replace") as f:
        for line in f:
            key = gemm_key(line)
            if key is not None:
                last[key] = _DESC["algo"].search(line).group(1)
    return last


def describe(key):
    rows_cols = re.search(r"rows=(\d+) cols=(\d+)", key[2])
    size = "%sx%s" % rows_cols.groups() if rows_cols else "?"
    return "D %s: A[%s] B[%s] D[%s] %s%s" % (size, key[0], key[1], key[2], key[3],
                                             " beta=" + key[4] if key[4] else "")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("logs", nargs="+", help="cuBLASLt logs (CUBLASLT_LOG_LEVEL=2), .xz allowed")
    ap.add_argument("--all", action="store_true", help="print every file's algorithm for every GEMM")
    args = ap.parse_args(argv)
    per_file = []
    for path in args.logs:
        try:
            c = choices(path)
        except (OSError, EOFError, lzma.LZMAError) as e:  # missing, unreadable, or a broken .xz
            print("cublaslt_choices.py: %s: cannot read (%s)" % (path, getattr(e, "strerror", None) or e),
                  file=sys.stderr)
            return 2
        if not c:
            print("cublaslt_choices.py: %s: no cublasLtMatmul line (was CUBLASLT_LOG_LEVEL 2 or more?)" % path,
                  file=sys.stderr)
            return 2
        per_file.append(c)
    keys = sorted(set().union(*per_file))
    width = max(len(p) for p in args.logs)
    same = 0
    for key in keys:
        algos = [c.get(key, "(not called)") for c in per_file]
        equal = len(set(algos)) == 1
        same += equal
        print(("same    " if equal else "differs ") + describe(key))
        if not equal or args.all:
            for path, algo in zip(args.logs, algos):
                print("    %-*s  %s" % (width, path, algo))
    print("%d GEMMs: %d the same in every file, %d differ" % (len(keys), same, len(keys) - same))
    return 0


if __name__ == "__main__":
    sys.exit(main())
