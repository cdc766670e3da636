"""vitddp-report: tables of vitddp runs (Markdown by default), from their HDF5 results files.

    vitddp-report summary A.h5 [B.h5 ...] [--json | --csv] [--probe PROBE.h5] [-o FILE]
    vitddp-report compare A.h5 B.h5 ... [--format markdown|csv|json] [-o FILE]
    vitddp-report buckets FILE.h5 [--per-step] [--format markdown|csv|json]
    vitddp-report overlap [--baseline ONE_GPU.h5] FILE.h5...
    vitddp-report speed OUTDIR                  (results/commands/speed.sh's folder)
    vitddp-report power smi-*.csv               (nvidia-smi samples)
    vitddp-report kernels ncu.csv [--gemm CEILINGS.json --model M | --floors P]  (Nsight Compute CSV)
    vitddp-report losses REF OTHER [REF OTHER ...]
    vitddp-report article DIR_OR_TAR... [-o table.md] [--plots DIR | --no-plots]

`vitddp-report SUBCOMMAND --help` describes each. Errors about a file or an argument print one
line naming it and exit with status 2 (VITDDP_TRACEBACK=1 shows the Python traceback of an
unexpected one instead).
"""
import argparse
import sys

from . import article, buckets, kernels, losses, overlap, power, predict, speed
from .bandwidth import read_probe
from .reader import ResultsError, check_outputs, run_command, write_output
from .runs_report import compare_text, collect, summary_text

TABLES = {  # subcommand -> (module main, one-line help)
    "buckets": (buckets.main, "algbw and busbw of each bucket's all-reduce (or --per-step) of one run"),
    "overlap": (overlap.main, "forward, backward, exposed and in-flight communication per run"),
    "speed": (speed.main, "vitddp against PyTorch from one results/commands/speed.sh folder"),
    "power": (power.main, "SM clocks, power and clock-event reasons from nvidia-smi samples"),
    "kernels": (kernels.main, "per-kernel-family time of one step from an Nsight Compute CSV, against GEMM-ceiling and DRAM-byte floors"),
    "losses": (losses.main, "whether pairs of runs trained alike (training/loss)"),
    "predict": (predict.main, "what-if step time, exposed comm and steps/s from one run and a link table"),
    "article": (article.main, "the article's table and plots from article_table.sh's folders or tars"),
}


def cmd_summary(argv, prog):
    """`summary`: metrics and configuration of each file (runs_report.summary_text)."""
    ap = argparse.ArgumentParser(prog=prog, description=(
        "Per file: steps/s, images/s (steps/s x batch x grad accumulation x world size), TFLOP/s, MFU, the "
        "step-time spread over the timed steps (min, median, p90, max, coefficient of variation), exposed "
        "communication, algbw and busbw (nccl-tests' definitions, GB/s = 1e9 bytes/s), peak memory where "
        "recorded, and the configuration (model, world size, batch, grad accumulation, precision, compression, "
        "all-reduce, attention, data source, bucket cap)."))
    ap.add_argument("files", nargs="+", metavar="FILE", help="vitddp results files (.h5)")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--json", action="store_true", help="JSON: {runs: [...], units: {...}}")
    g.add_argument("--csv", action="store_true", help="CSV: a header and one row per file")
    ap.add_argument("-o", "--output", metavar="FILE", help="also write the output to FILE")
    ap.add_argument("--probe", metavar="FILE", help="a vitddp-probe file: add the run's median bucket size and the "
                    "probe's all-reduce busbw at that size (interpolated in log2 bytes) next to the run's busbw")
    a = ap.parse_args(argv)
    check_outputs(a, {"output": "-o"})
    ms, _ = collect(a.files, read_probe(a.probe) if a.probe else None)
    write_output(summary_text(ms, "json" if a.json else "csv" if a.csv else "markdown"), a.output)
    return 0


def cmd_compare(argv, prog):
    """`compare`: differing options and metrics with ratios to the first file."""
    ap = argparse.ArgumentParser(prog=prog, description=(
        "The options that differ between the runs (option.* attributes and the configuration), then the "
        "metrics of `summary` side by side with the ratio of each to the first file's (steps/s, images/s, "
        "exposed communication, busbw, memory)."))
    ap.add_argument("files", nargs="+", metavar="FILE", help="vitddp results files; the first is the reference")
    ap.add_argument("--format", choices=["markdown", "csv", "json"], default="markdown", help="output format [markdown]")
    ap.add_argument("-o", "--output", metavar="FILE", help="also write the output to FILE")
    a = ap.parse_args(argv)
    check_outputs(a, {"output": "-o"})
    if len(a.files) < 2:
        raise ResultsError("compare: give at least two files (the first is the reference)")
    write_output(compare_text(a.files, a.format), a.output)
    return 0


def main(argv=None):
    """Entry point (console script vitddp-report); returns the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    subs = {"summary": (cmd_summary, "metrics and configuration of each run"),
            "compare": (cmd_compare, "differing options and metrics side by side, ratios to the first")}
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write(__doc__ + "\nsubcommands:\n" + "".join(
            "  %-8s %s\n" % (k, h) for k, (_, h) in list(subs.items()) + list(TABLES.items())))
        return 0 if argv else 2
    sub, rest = argv[0], argv[1:]
    prog = "vitddp-report " + sub

    def body():
        if sub in subs:
            return subs[sub][0](rest, prog)
        if sub in TABLES:
            return TABLES[sub][0](rest, prog=prog)
        raise ResultsError("unknown subcommand '%s' (one of %s)" % (sub, ", ".join(list(subs) + list(TABLES))))
    return run_command("vitddp-report", body)


if __name__ == "__main__":
    sys.exit(main())
