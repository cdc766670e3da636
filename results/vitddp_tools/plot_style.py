"""What vitddp-plot's subcommands share: the article's NVTX colours and the phase names, matplotlib's
settings (Agg backend: no display needed), the output files of -o / --format, and the name of what
moves a rank's gradients (NCCL and its transport, the copy engines, MPI).

Errors are PlotError (= reader.ResultsError): one line, exit status 2 in vitddp-plot.
"""
import os

import numpy as np
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 (after the backend is chosen)

from .reader import ResultsError, text as _text  # noqa: E402


# The article's NVTX colours (src/io/nvtx.h), so the plots read like the nsys timeline.
COLORS = {
    "data_wait": "#D62728",     # "get batch" (red)
    "input_wait": "#BBBBBB",    # waiting for the host-to-device copy (grey)
    "forward": "#2CA02C",       # "forward" (green)
    "backward": "#9467BD",      # "backward" (purple)
    "exposed_comm": "#FF7F0E",  # waiting for the last all-reduce (orange, as "all-reduce bucket k")
    "optimizer": "#FFD700",     # "optimizer step" (yellow)
}
HATCH = {"exposed_comm": "////"}  # exposed comm: the all-reduce colour, hatched (the compute stream waits)
BUCKET_COLORS = ("#FF7F0E", "#C85A00")  # alternate shades so adjacent buckets stay distinct
PHASE_LABELS = {
    "data_wait": "data wait (host)",
    "input_wait": "input wait",
    "forward": "forward",
    "backward": "backward",
    "exposed_comm": "exposed comm",
    "optimizer": "optimizer",
}

plt.rcParams.update({
    "font.size": 11,
    "axes.titlesize": 13,
    "axes.labelsize": 12,
    "xtick.labelsize": 10,
    "ytick.labelsize": 10,
    "legend.fontsize": 10,
    "legend.title_fontsize": 10,
    "savefig.dpi": 150,
    "svg.hashsalt": "vitddp",  # stable ids in SVG output
    "axes.spines.top": False,
    "axes.spines.right": False,
})


PlotError = ResultsError  # one line, exit status 2


# ----------------------------------------------------------------------------------------- output

def output_paths(out, fmt):
    """The files to write for -o `out` and --format `fmt` (png, svg, both or None)."""
    root, ext = os.path.splitext(out)
    ext = ext.lower()
    if fmt == "both":
        base = root if ext in (".png", ".svg") else out
        paths = [base + ".png", base + ".svg"]
    elif fmt in ("png", "svg"):
        paths = [out if ext == "." + fmt else (root if ext in (".png", ".svg") else out) + "." + fmt]
    elif ext in (".png", ".svg"):
        paths = [out]
    else:
        raise PlotError("-o %s: the name must end in .png or .svg (or give --format png|svg|both)" % out)
    for p in paths:
        d = os.path.dirname(os.path.abspath(p))
        if not os.path.isdir(d):
            raise PlotError("-o %s: directory '%s' does not exist" % (out, d))
    return paths


def save(fig, out, fmt):
    """Writes `fig` to the output file(s), prints their names and closes the figure."""
    for p in output_paths(out, fmt):
        meta = {"Date": None} if p.lower().endswith(".svg") else {}
        fig.savefig(p, bbox_inches="tight", metadata=meta)
        print("wrote %s" % p)
    plt.close(fig)


def legend_outside(ax, **kw):
    """Places the legend to the right of the axes, outside the data."""
    return ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False, **kw)


# ----------------------------------------------------------------------------------------- names

def comm_name(run, r):
    """What moves rank r's gradients: 'NCCL' plus its transport (attribute nccl_transport, e.g.
    'P2P [P2P/CUMEM/read]' -> 'NCCL P2P') when recorded, 'copy-engine' for --allreduce
    copy-engine runs (transport 'copy-engine (...)'), or 'MPI' on the CPU backend."""
    if run.backend != "gpu":
        return "MPI"
    tr = run.attr("nccl_transport", None)
    if tr is None:
        return "NCCL"
    tr = _text(tr[r] if isinstance(tr, np.ndarray) and tr.ndim == 1 and r < len(tr) else tr)
    first = tr.split(" ")[0] if tr else ""
    if first == "copy-engine":
        return first
    return "NCCL" if first in ("", "none", "unknown") else "NCCL " + first
