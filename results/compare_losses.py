#!/usr/bin/env python3
"""Compatibility entry point: the same as `vitddp-report losses` (vitddp_tools.losses; pip install ./results).

Kept for the command files under results/commands/ that call this path; runs from the source tree
without installing the package.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vitddp_tools.losses import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(prog="compare_losses.py"))
