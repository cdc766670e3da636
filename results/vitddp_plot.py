#!/usr/bin/env python3
"""Compatibility entry point: the same as `vitddp-plot` (vitddp_tools.plot; pip install ./results).

Kept for the command files under results/commands/ that call this path; runs from the source tree
without installing the package.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vitddp_tools.plot import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(prog="vitddp_plot.py"))
