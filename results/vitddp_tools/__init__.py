"""vitddp_tools: post-processing of vitddp's HDF5 results files (layout: docs/schema.md).

Modules: reader (the one reader of results files), bandwidth (nccl-tests' algbw/busbw of the
bucket all-reduces), metrics (run-level figures), plot (console script vitddp-plot; plot_style: its
colours, settings and output files; plot_timeline: its timeline), report
(console script vitddp-report: summary, compare and the tables of the benchmark scripts).
"""
__version__ = "0.1.0"
