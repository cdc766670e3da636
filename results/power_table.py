#!/usr/bin/env python3
"""Compatibility entry point: the same as `vitddp-report power` (vitddp_tools.power; pip install ./results).

Kept for the command files under results/commands/ that call this path; runs from the source tree
without installing the package.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    from vitddp_tools.power import main  # noqa: E402
    from vitddp_tools.reader import run_command  # noqa: E402
except ImportError as e:  # numpy, h5py or matplotlib missing on this machine
    sys.stderr.write("power_table.py: error: %s (install python3-h5py, python3-numpy, python3-matplotlib, or pip install ./results)" % e + "\n")
    sys.exit(2)

if __name__ == "__main__":
    sys.exit(run_command("power_table.py", lambda: main(prog="power_table.py")))
