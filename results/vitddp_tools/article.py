"""`vitddp-report article`: the article's table from the runs of results/commands/article_table.sh, and its plots.

    vitddp-report article article-np4-*.tar.gz -o table.md --plots plots/
    vitddp-report article DIR... --no-plots           # folders the tars unpack to

Each argument is a folder holding (at any depth) the manifest.tsv of one article_table.sh
invocation, or such an invocation's .tar.gz / .tar (unpacked into a temporary folder; a tar split
into .part-aa, .part-ab ... is given as its first part). Reads, per manifest line, vitddp's HDF5
file (summary/steps_per_second, the median over the timed steps of the slowest rank's
timing/exposed_comm, nccl_transport) or PyTorch's JSON (bench_torch_ddp.py: steps_per_s).

Prints Markdown (also to -o FILE):
  - per precision, the article's table: one row per configuration (no DDP, DDP 1 rank, the
    scaling runs, one 2000 MB bucket with bucket copy, + view, + bf16, + PowerSGD, bucket sizes),
    one column per interconnect: steps/s per GPU (share of our 1-GPU figure), PyTorch's figure
    where the twin ran;
  - per precision and interconnect, the detail: ranks, steps/s per GPU, share of our 1-GPU
    figure (vitddp --no-ddp, same precision, same invocation when it has one), median exposed
    communication per step, PyTorch steps/s per GPU (share of PyTorch's own 1-GPU figure),
    vitddp / PyTorch;
  - the targets: 25 MiB buckets over NVLink >= 95% (2 GPUs), 93% (4) or 90% (8 GPUs) of our
    1-GPU figure, per precision; and whether each run used the interconnect it was meant to.
Unless --no-plots, writes into --plots DIR (default: the folder of -o, else .) with
vitddp-plot: scaling-<transport>-<precision>.png (`scaling`: no DDP + 25 MiB buckets on
2..NP ranks) and timeline-np<N>-<transport>-<precision>-b25.png (`timeline` of the largest
25 MiB run, NVLink and fp32 preferred: the 8-rank one in "[8 of 8]").
Exit 0; 2 when no manifest is found.
"""
import argparse
import contextlib
import csv
import glob
import io
import json
import os
import statistics
import sys
import tarfile
import tempfile

from . import plot as vitddp_plot
from .reader import ResultsError, Run, check_outputs, write_text

ROWS = [  # key, label (the article's rows first)
    ("noddp", "no DDP (1 GPU)"),
    ("b25-np1", "DDP, 1 rank, 25 MB buckets"),
    ("b25-np2", "DDP, 2 ranks, 25 MB buckets"),
    ("b25-np4", "DDP, 4 ranks, 25 MB buckets"),
    ("b2000-copy", "DDP, one 2000 MB bucket, bucket copy (view off: PyTorch's default)"),
    ("b2000", "+ gradient_as_bucket_view (PyTorch: + static_graph)"),
    ("b2000-bf16", "+ bf16 compression"),
    ("b2000-powersgd", "+ PowerSGD rank 1 from step 2 (instead of bf16)"),
    ("b1", "view, 1 MB buckets"),
    ("b25", "view, 25 MB buckets (the default)"),
    ("b25-ce", "view, 25 MB buckets, all-reduce by the copy engines (--allreduce copy-engine)"),
    ("b25-bf16", "view + bf16, 25 MB buckets"),
    ("b25-powersgd", "view + PowerSGD from step 2, 25 MB buckets"),
    ("b100", "view, 100 MB buckets"),
    ("b500", "view, 500 MB buckets"),
    ("slurm-train", "slurm/train.sbatch as it is (25 MB, host data, 10 + 3 timed steps)"),
]
LABEL = dict(ROWS)
TRANSPORTS = ["nvlink", "shm", "net", "cpu"]
TNAME = {"nvlink": "NVLink", "shm": "SHM", "net": "NET", "cpu": "CPU (MPI)"}
EXPECTED_NCCL = {"nvlink": "P2P", "shm": "SHM", "net": "NET", "cpu": "none"}
PRECISIONS = ["fp32", "tf32", "bf16"]


def target_share(np_):
    """Our per-GPU target over NVLink, % of the 1-GPU figure (docs/benchmarks.md)."""
    return {2: 95.0, 4: 93.0}.get(np_, 90.0)


def unpack(path, tmp):
    """A folder for `path`: itself, or a temporary folder named as the tar (the name the tables show
    for its runs) with the tar unpacked."""
    if os.path.isdir(path):
        return path
    dest = os.path.join(tempfile.mkdtemp(dir=tmp), os.path.basename(path.rsplit(".part-", 1)[0]))
    os.makedirs(dest)
    if ".part-" in os.path.basename(path):  # split tar: concatenate every part
        whole = os.path.join(dest, "whole.tar.gz")
        with open(whole, "wb") as out:
            for part in sorted(glob.glob(path.rsplit(".part-", 1)[0] + ".part-*")):
                with open(part, "rb") as f:
                    out.write(f.read())
        path = whole
    with tarfile.open(path) as t:
        t.extractall(dest)
    return dest


def h5_result(path):
    """steps/s per rank, median exposed comm (ms, slowest rank per step), NCCL transports, or None."""
    try:
        with Run(path) as run:
            sps = run.summary("steps_per_second")
            exposed = run.step_series("timing/exposed_comm")[:, run.timed()]
            exp_ms = 1e3 * statistics.median(exposed.max(axis=0).tolist()) if exposed.size else 0.0
            tr = run.transports()
            return {"sps": sps, "exposed_ms": exp_ms, "transport": sorted({t.split()[0] for t in tr if t}),
                    "model": run.model if "model" in run.f.attrs else ""}
    except (ResultsError, ValueError):
        return None


def load(dirs):
    """Every manifest line under `dirs` as a dict with its result ('res') read from its file."""
    runs = []
    for inv, d in enumerate(dirs):
        manifests = sorted(glob.glob(os.path.join(d, "**", "manifest.tsv"), recursive=True))
        for m in manifests:
            base = os.path.dirname(m)
            with open(m) as f:
                for r in csv.DictReader(f, delimiter="\t"):
                    r["inv"] = base
                    r["ranks"] = int(r["ranks"])
                    r["path"] = os.path.join(base, r["file"]) if r.get("file") else ""
                    r["res"] = None
                    if r["rc"] == "0" and r["path"]:
                        if r["impl"] == "torch":
                            try:
                                j = json.load(open(r["path"]))
                                r["res"] = {"sps": float(j["steps_per_s"]), "exposed_ms": None, "transport": []}
                            except (OSError, KeyError, ValueError):
                                pass
                        else:
                            r["res"] = h5_result(r["path"])
                    runs.append(r)
    return runs


def fmt(x, spec=".2f"):
    return "n/a" if x is None else format(x, spec)


class Table:
    def __init__(self, runs):
        self.runs = runs

    def find(self, impl, t, p, key):
        """The runs of one cell (several when invocations repeat it), any exit code."""
        impls = ("vitddp", "sbatch") if impl == "vitddp" else (impl,)
        return [r for r in self.runs if r["impl"] in impls and r["transport"] == t and r["precision"] == p and r["key"] == key]

    def value(self, impl, t, p, key):
        """(steps/s, exposed ms, run) of a cell (the last successful run), or (None, None, reason)."""
        rs = self.find(impl, t, p, key)
        ok = [r for r in rs if r["res"]]
        if ok:
            return ok[-1]["res"]["sps"], ok[-1]["res"]["exposed_ms"], ok[-1]
        if not rs:
            return None, None, None
        r = rs[-1]
        return None, None, ("skipped" if r["rc"] == "skipped" else "failed (exit %s)" % r["rc"])

    def baseline(self, impl, p, inv=None):
        """1-GPU figure without DDP of `impl` in precision p: from invocation `inv` if it has one."""
        rs = [r for r in self.runs if r["impl"] == impl and r["precision"] == p and r["key"] == "noddp" and r["res"]]
        same = [r for r in rs if r["inv"] == inv]
        pick = (same or rs)
        return (pick[-1]["res"]["sps"], pick[-1]) if pick else (None, None)


def cell(sps, base, reason=None):
    if sps is None:
        return reason if isinstance(reason, str) else ""
    return "%.2f (%.0f%%)" % (sps, 100 * sps / base) if base else "%.2f" % sps


def _precision_tables(T, runs, p, ts):
    """Markdown lines of precision `p`'s table: one row per configuration, one column per transport,
    each cell our per-GPU steps/s with its share of our 1-GPU figure, and PyTorch's beside them."""
    def ones(impl):
        rs = [r for r in runs if r["impl"] == impl and r["precision"] == p and r["key"] == "noddp" and r["res"]]
        return ", ".join("%.2f (%s)" % (r["res"]["sps"], os.path.basename(r["inv"])) for r in rs) or "n/a"
    out = ["## %s\n" % p,
           "1-GPU figures without DDP (job): ours %s; PyTorch %s. Each share is against the figure "
           "of the same job where it has one.\n" % (ones("vitddp"), ones("torch"))]
    head = ["configuration"] + [TNAME[t] for t in ts] + ["PyTorch " + " / ".join(TNAME[t] for t in ts)]
    out.append("| " + " | ".join(head) + " |")
    out.append("|" + " --- |" * len(head))
    for key, label in ROWS:
        cells = []
        for t in ts:
            sps, _, why = T.value("vitddp", t, p, key)
            b, _ = T.baseline("vitddp", p, why["inv"] if isinstance(why, dict) else None)
            cells.append(cell(sps, b, why))
        tc = []
        for t in ts:
            sps, _, why = T.value("torch", t, p, key)
            b, _ = T.baseline("torch", p, why["inv"] if isinstance(why, dict) else None)
            tc.append(cell(sps, b, why) or "-")
        if not any(cells) and all(c == "-" for c in tc):
            continue
        ranks = sorted({r["ranks"] for t in ts for impl in ("vitddp", "torch") for r in T.find(impl, t, p, key)})
        lab = label + ("" if key.startswith("b25-np") or key == "noddp" or not ranks
                       else " [%s ranks]" % "/".join(map(str, ranks)))
        out.append("| " + " | ".join([lab] + cells + [" / ".join(tc)]) + " |")
    out.append("")
    return out


def _detail_table(T, p, t):
    """Markdown lines of the detail table of precision `p` on transport `t`: ranks, steps/s, share,
    exposed communication, the NCCL transport used and PyTorch's figure per configuration."""
    out = ["### %s, %s\n" % (TNAME[t], p),
           "| configuration | ranks | steps/s per GPU | share of our 1-GPU figure | exposed comm median (ms) "
           "| NCCL transport | PyTorch steps/s per GPU (share of its 1-GPU) | vitddp / PyTorch |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for key, label in ROWS:
        sps, exp, why = T.value("vitddp", t, p, key)
        tsps, _, twhy = T.value("torch", t, p, key)
        if why is None and twhy is None:
            continue
        run = why if isinstance(why, dict) else (twhy if isinstance(twhy, dict) else None)
        ranks = run["ranks"] if run else (T.find("vitddp", t, p, key) or T.find("torch", t, p, key))[-1]["ranks"]
        b, _ = T.baseline("vitddp", p, why["inv"] if isinstance(why, dict) else None)
        tb, _ = T.baseline("torch", p, twhy["inv"] if isinstance(twhy, dict) else None)
        share = "%.1f%%" % (100 * sps / b) if sps and b else (why if isinstance(why, str) else "n/a")
        tr = ", ".join(why["res"]["transport"]) if isinstance(why, dict) else ""
        tcell = ("%.2f (%.0f%%)" % (tsps, 100 * tsps / tb) if tb else "%.2f" % tsps) if tsps else (twhy if isinstance(twhy, str) else "-")
        ratio = "%.2fx" % (sps / tsps) if sps and tsps else ""
        out.append("| %s | %d | %s | %s | %s | %s | %s | %s |" % (
            label, ranks, fmt(sps), share, fmt(exp), tr, tcell, ratio))
    out.append("")
    return out


def _target_lines(T, runs, ps, nps):
    """One line per precision, interconnect (NVLink, CPU) and rank count: the 25 MB run's share of our
    1-GPU figure against target_share(ranks), and the best row of the same invocation."""
    lines = []
    for p in ps:
        for t in ("nvlink", "cpu"):
            for n in nps:
                if n < 2:
                    continue
                key = "b25" if any(r["key"] == "b25" and r["ranks"] == n and r["transport"] == t and r["precision"] == p
                                   for r in runs) else "b25-np%d" % n
                sps, _, why = T.value("vitddp", t, p, key)
                if not isinstance(why, dict) or why["ranks"] != n:
                    continue
                b, _ = T.baseline("vitddp", p, why["inv"])
                if not b:
                    continue
                share = 100 * sps / b
                tgt = target_share(n)
                best = max(((r["res"]["sps"], r["key"]) for r in runs if r["impl"] == "vitddp" and r["res"]
                            and r["transport"] == t and r["precision"] == p and r["ranks"] == n and r["inv"] == why["inv"]),
                           default=(sps, key))
                lines.append("- %s, %s, %d ranks, 25 MB buckets: %.2f steps/s per GPU = %.1f%% of our 1-GPU %.2f "
                             "(target >= %.0f%%): **%s**; best row of the invocation: %s %.2f (%.1f%%)" % (
                                 TNAME[t], p, n, sps, share, b, tgt, "met" if share >= tgt else "MISSED",
                                 best[1], best[0], 100 * best[0] / b))
    return lines or ["- no 25 MB multi-rank run with a 1-GPU figure in the same precision"]


def _check_lines(runs):
    """The interconnect check (every multi-rank file used the transport its folder asked for) and
    the runs that failed or were skipped."""
    bad = []
    for r in runs:
        if r["impl"] in ("vitddp", "sbatch") and r["res"] and r["ranks"] > 1:
            # the copy-engine rows record "copy-engine (... NCCL: <transport>)"
            want = "copy-engine" if r["key"].endswith("-ce") else EXPECTED_NCCL.get(r["transport"])
            got = r["res"]["transport"]
            if want and got and any(g != want for g in got):
                bad.append("%s/%s/%s: %s" % (r["transport"], r["precision"], r["key"], ", ".join(got)))
    out = ["- interconnect check (`nccl_transport` of every multi-rank vitddp file): " +
           ("every run used the one asked for" if not bad else "MISMATCH in %d run(s): %s%s" % (
               len(bad), "; ".join(bad[:8]), "; ..." if len(bad) > 8 else ""))]
    failed = ["%s/%s/%s %s (exit %s)" % (r["transport"], r["precision"], r["impl"], r["key"], r["rc"])
              for r in runs if r["rc"] not in ("0", "skipped")]
    skipped = ["%s/%s/%s %s" % (r["transport"], r["precision"], r["impl"], r["key"]) for r in runs if r["rc"] == "skipped"]
    if failed:
        out.append("- failed: " + "; ".join(failed))
    if skipped:
        out.append("- skipped (over the invocation's time budget): " + "; ".join(skipped))
    return out


def markdown(runs):
    """The article's table as Markdown: per precision a table of configurations x interconnects
    (ours and PyTorch's per-GPU steps/s and shares), the detail per interconnect, the targets and
    the checks."""
    T = Table(runs)
    ps = [p for p in PRECISIONS if any(r["precision"] == p for r in runs)]
    ts = [t for t in TRANSPORTS if any(r["transport"] == t for r in runs)]
    nps = sorted({r["ranks"] for r in runs})
    np_max = nps[-1] if nps else 0
    models = sorted({r["res"]["model"] for r in runs if r["res"] and r["res"].get("model")}) or ["vit_l_32"]
    out = ["# The article's table: %s, up to %d ranks\n" % (", ".join(models), np_max),
           "Per-GPU steps/s (`summary/steps_per_second`; PyTorch: `steps_per_s` of "
           "results/bench_torch_ddp.py); in brackets the share of the same framework's 1-GPU figure "
           "without DDP in the same precision. Made by vitddp-report article from %d runs.\n" % len(runs)]
    for p in ps:
        out.extend(_precision_tables(T, runs, p, ts))
    out.append("## Detail per interconnect\n")
    for p in ps:
        for t in ts:
            if any(r["precision"] == p and r["transport"] == t for r in runs):
                out.extend(_detail_table(T, p, t))
    out.append("## Targets\n")
    out.extend(_target_lines(T, runs, ps, nps))
    out.extend(_check_lines(runs))
    out.append("")
    return "\n".join(out)


def plots(runs, outdir):
    """scaling-<transport>-<precision>.png and one timeline, through vitddp-plot; the files made."""
    os.makedirs(outdir, exist_ok=True)
    made = []

    def call(args, out):
        """Runs `vitddp-plot ARGS -o OUT` in this process, its console lines kept out of the table."""
        log, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(err):
            rc = vitddp_plot.main(args + ["-o", out])
        if rc == 0:
            made.append(out)
        else:
            print("vitddp-report article: vitddp-plot %s failed: %s" % (args[0], (err.getvalue() or log.getvalue()).strip()[-300:]),
                  file=sys.stderr)

    ok = [r for r in runs if r["impl"] == "vitddp" and r["res"] and r["path"].endswith(".h5")]
    for t in TRANSPORTS:
        for p in PRECISIONS:
            files = []
            scal = [r for r in ok if r["transport"] == t and r["precision"] == p
                    and (r["key"] == "b25" or (r["key"].startswith("b25-np") and r["ranks"] > 1))]
            if not scal:
                continue
            files += [r["path"] for r in scal]
            noddp = [r for r in ok if r["precision"] == p and r["key"] == "noddp"]
            same = [r for r in noddp if r["inv"] == scal[0]["inv"]]
            if noddp:  # the 1-rank point of every line (b25-np1 is left out: it would take that place)
                files.append((same or noddp)[-1]["path"])
            call(["scaling"] + sorted(set(files)), os.path.join(outdir, "scaling-%s-%s.png" % (t, p)))
    b25 = [r for r in ok if r["key"] == "b25"]
    if b25:
        b25.sort(key=lambda r: (r["ranks"], r["transport"] in ("nvlink", "cpu"), r["precision"] == "fp32"))
        r = b25[-1]
        call(["timeline", r["path"]],
             os.path.join(outdir, "timeline-np%d-%s-%s-b25.png" % (r["ranks"], r["transport"], r["precision"])))
    return made


def main(argv=None, prog="vitddp-report article"):
    """Prints (and with -o writes) the article's table; returns 0, or 2 without a manifest."""
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+", metavar="DIR_OR_TAR")
    ap.add_argument("-o", "--output", help="also write the Markdown here")
    ap.add_argument("--plots", metavar="DIR", help="folder for the plots [folder of -o, else .]")
    ap.add_argument("--no-plots", action="store_true", help="only the table")
    a = ap.parse_args(argv)
    check_outputs(a, {"output": "-o"})
    with tempfile.TemporaryDirectory() as tmp:
        dirs = []
        for x in a.inputs:
            if not os.path.exists(x):
                print("%s: %s: no such file or folder" % (prog, x), file=sys.stderr)
                return 2
            dirs.append(unpack(x, tmp))
        runs = load(dirs)
        if not runs:
            print("%s: no manifest.tsv under %s" % (prog, " ".join(a.inputs)), file=sys.stderr)
            return 2
        md = markdown(runs)
        if not a.no_plots:
            outdir = a.plots or (os.path.dirname(os.path.abspath(a.output)) if a.output else ".")
            made = plots(runs, outdir)
            md += "\nPlots: " + (", ".join(os.path.basename(m) for m in made) or "none") + "\n"
        print(md)
        if a.output:
            write_text(a.output, md)
    return 0

