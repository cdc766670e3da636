"""vitddp-report predict: expected step time, exposed communication and steps/s per GPU of a what-if
configuration (ranks, transport, bucket cap, compression, DDP or ZeRO-1) from one results file and a
link table, and the validation of the model against measured runs.

    vitddp-report predict REF.h5 [--baseline ONE_GPU.h5] [--link-table T.csv | --fit-link RUN.h5...] [--small-link-table S.csv]
                          [--ranks N] [--transport T] [--comm-streams auto|N] [--bucket-cap-mb C] [--first-bucket-mb F]
                          [--compression none|fp16|bf16|powersgd] [--mode ddp|zero1] [--allgather-dtype auto|fp32|bf16] [--json] [-o FILE]
    vitddp-report predict --validate DIR_OR_TAR... [-o validation.md] [--plot validation.png]
    vitddp-report predict --fit-link RUN.h5... --write-link-table T.csv

The model: predict_core's module doc (the copy-engine all-reduce: predict_ce's); the link-table
file: predict_link's.
"""
import argparse
import glob
import math
import os
import re
import tempfile

import numpy as np

from .bandwidth import bus_factor
from .predict_ce import CE_TRANSPORT, RunShares, comm_streams_of, fit_gain, gain_rows
from .predict_core import (CASTS, Baseline, Reference, Scenario, fit_cast_cost, gains_at, predict, prediction_dict,
                           prediction_text, transport_of)
from .predict_link import COLLECTIVES, LinkTable, curve_rows, default_table, load_table
from .reader import ResultsError, Run, check_outputs, text, write_output, write_text

# options whose differences between a run and its reference the model covers (or that do not change
# the device's work); any other difference is named in the validation's notes
MODELED = frozenset({"bucket-cap-mb", "first-bucket-mb", "compression", "no-overlap", "powersgd-rank",
           "powersgd-min-compression-rate", "powersgd-start-step", "out", "seed", "steps", "warmup-steps",
           "cooldown-steps", "progress-every", "flush-every", "trace", "step-timeout", "data-workers", "overwrite",
           "powersgd-no-warm-start", "powersgd-no-error-feedback", "comm-streams"})


def _timed_min_median(run, name):
    """Per bucket: median over the timed steps of the minimum over ranks of series `name` (the rank
    that reached the collective last waited least for its peer), float64 [buckets]."""
    v = np.asarray(run.bucket_series(name), dtype=float)[:, run.timed()]
    return np.median(v.min(axis=0), axis=0)


def fit_link_table(runs, name="fitted", shares=None):
    """A LinkTable fitted from multi-rank vitddp runs (list of Run), per transport (transport_of):
    allreduce rows from the per-bucket (buckets/bytes_sent, buckets/allreduce_time) of the runs
    with one call per bucket (compression none, fp16, bf16; predict_link.curve_rows); `cast` and
    `powersgd` rows from buckets/compress_time against buckets/bytes of the runs with that
    compression. Times: _timed_min_median. Copy-engine runs (predict_ce): first the `concurrency`
    rows (predict_ce.fit_gain over the runs that differ only in modelled options; predict_ce.gain_rows:
    the sizes of positive G, the others in the table's notes), then each bucket's times as if alone
    (RunShares.scaled at its payload's gain) in place of the measured ones.
    `shares`: {run path: RunShares} already computed (computed here otherwise). ResultsError when no
    run has bucket times."""
    pts = {}
    usable = [r for r in runs if r.world_size >= 2 and r.ddp and r.has("buckets/allreduce_time")]
    shares = dict(shares or {})
    for run in usable:
        if run.allreduce == CE_TRANSPORT and run.path not in shares:
            shares[run.path] = RunShares.from_run(run)
    ce = [shares[r.path] for r in usable if r.allreduce == CE_TRANSPORT]
    comparable = lambda a, b: not _option_differences(a, b) and not _option_differences(b, a)
    gains, gain_notes = gain_rows(fit_gain(ce, comparable), name)
    gains = LinkTable(gains, name)
    for run in usable:
        tr, comp = transport_of(run), run.compression
        nb = np.asarray(run.data("buckets/bytes"), dtype=float)
        sent = np.median(np.asarray(run.bucket_series("buckets/bytes_sent"), dtype=float)[0, run.timed()], axis=0)
        if run.allreduce == CE_TRANSPORT:
            sh, g = shares[run.path], gains_at(gains, tr, sent)
            times = lambda series: np.median(sh.scaled(series, g).min(axis=0), axis=0)
        else:
            times = lambda series: _timed_min_median(run, "buckets/" + series + "_time")
        if comp in ("none", "fp16", "bf16"):
            d = pts.setdefault((tr, "allreduce", run.world_size), ([], []))
            d[0].extend(sent)
            d[1].extend(times("allreduce"))
        if comp in ("fp16", "bf16", "powersgd") and run.has("buckets/compress_time"):
            d = pts.setdefault((tr, "cast" if comp != "powersgd" else "powersgd", 0), ([], []))
            d[0].extend(nb)
            d[1].extend(times("compress"))
    rows = []
    for (tr, coll, n), (b, t) in sorted(pts.items()):
        if not any(x > 0 and y > 0 for x, y in zip(b, t)):
            continue  # e.g. a file that records no communication (bytes_sent 0)
        factor = bus_factor(n, coll) if coll == "allreduce" else 1.0
        rows += curve_rows(tr, coll, b, t, factor, name)
    if not rows:
        raise ResultsError("--fit-link: no multi-rank DDP run with per-bucket times among %d files" % len(runs))
    table = LinkTable(rows + gains.rows, name)
    table.notes += gain_notes
    if any(s.streams > 1 for s in ce) and not gains.rows and not gain_notes:
        table.notes.append("%s: no copy-engine run on one comm stream measured the payloads of the runs on several "
                           "(with the same options otherwise): no concurrency rows, G = 1" % name)
    return table


def _scenario(a, ref):
    """The Scenario of the command line, defaulting every field to the reference's."""
    comp = a.compression or ref.compression
    return Scenario(ranks=a.ranks if a.ranks is not None else ref.ranks, transport=a.transport or ref.transport,
                    cap_mb=a.bucket_cap_mb if a.bucket_cap_mb is not None else ref.cap_mb,
                    first_mb=a.first_bucket_mb if a.first_bucket_mb is not None else ref.first_mb,
                    compression=comp, mode=a.mode, overlap=not a.no_overlap,
                    powersgd_rank=a.powersgd_rank if a.powersgd_rank is not None else int(ref.options.get("powersgd-rank", "1")),
                    powersgd_rate=a.powersgd_rate if a.powersgd_rate is not None
                    else float(ref.options.get("powersgd-min-compression-rate", "2")),
                    precision=ref.precision, allgather_dtype=a.allgather_dtype or "auto",
                    comm_streams=_comm_streams(a, ref, a.transport or ref.transport, comp))


def _comm_streams(a, ref, transport, compression):
    """The scenario's comm streams: --comm-streams N; else the reference's count when the transport
    is the reference's and its --comm-streams was not auto; else vitddp's auto rule (2 for the
    copy-engine transport under bf16 without compression, otherwise 1). ResultsError for a value
    that is neither auto nor an integer."""
    v = a.comm_streams
    if v is None and transport == ref.transport and ref.options.get("comm-streams", "auto") != "auto":
        return ref.comm_streams
    if v is None or v == "auto":
        return 2 if transport == CE_TRANSPORT and ref.precision == "bf16" and compression == "none" else 1
    try:
        return int(v)
    except ValueError:
        raise ResultsError("--comm-streams: expected auto or an integer in [1, 4], got '%s'" % v)


def _open_all(paths):
    """Run objects of every path (each checked before any work starts)."""
    return [Run(p) for p in paths]


def _untar(path, tmp):
    """The .h5 members of tar `path` unpacked under `tmp` (a folder of their own); list of paths."""
    import tarfile
    dest = os.path.join(tmp, "%d-%s" % (len(os.listdir(tmp)), os.path.basename(os.path.dirname(os.path.abspath(path)))))
    os.makedirs(dest)
    try:
        with tarfile.open(path) as t:
            t.extractall(dest, members=[m for m in t.getmembers() if m.name.endswith(".h5") and m.isfile()])
    except (tarfile.TarError, OSError) as e:
        raise ResultsError("--validate %s: cannot unpack (%s)" % (path, e))
    return [(f, os.path.relpath(f, dest)[:-3]) for f in glob.glob(os.path.join(dest, "**", "*.h5"), recursive=True)]


def unpack(paths, tmp):
    """The .h5 files of `paths` (folders searched recursively, .tar/.tar.gz/.tar.xz archives unpacked
    into `tmp` first) as sorted (path, label) pairs, label = the path inside its folder or archive
    without .h5; ResultsError for a missing path or none found."""
    files = []
    for i, p in enumerate(paths):
        if not os.path.exists(p):
            raise ResultsError("--validate %s: no such file or folder" % p)
        if os.path.isdir(p):
            found = [(f, os.path.relpath(f, p)[:-3]) for f in glob.glob(os.path.join(p, "**", "*.h5"), recursive=True)]
            for t in sorted(glob.glob(os.path.join(p, "**", "*.tar*"), recursive=True)):
                found += _untar(t, tmp)
            files += found
        elif ".tar" in os.path.basename(p):
            files += _untar(p, tmp)
        elif p.endswith(".h5"):
            files.append((p, os.path.basename(p)[:-3]))
    if not files:
        raise ResultsError("--validate %s: no .h5 files" % " ".join(paths))
    return sorted(set(files))


def _option_differences(a, b):
    """Options of `a` ({name: str}) that differ from `b` and that the model does not cover: sorted list
    of 'name=value'. An option b's (older) build lacks counts as its default there: a value 0, off,
    false, auto, none or empty in `a` is no difference."""
    default = {"0", "off", "false", "auto", "none", ""}
    return sorted("%s=%s" % (k, a[k]) for k in a if k not in MODELED
                  and (a[k] != b[k] if k in b else a[k].lower() not in default))


def _differences(run, ref_options):
    """_option_differences of `run`'s options against `ref_options` ({name: str})."""
    return _option_differences(run.options(), ref_options)


def cast_references(runs, ref):
    """(label, Reference) of the runs of `runs` (reader.Run) that measure what the fp16/bf16 casts
    cost backward next to reference `ref` (predict_core.fit_cast_cost): multi-rank DDP with that
    compression, on the reference's transport, precision, model and batch, with no option difference
    from it that the model does not represent (nor a --comm-streams-table one). label: Run.label."""
    return [(r.label, Reference.from_run(r)) for r in runs
            if r.world_size >= 2 and r.ddp and r.compression in CASTS and transport_of(r) == ref.transport
            and (r.precision, r.model, r.batch_size) == (ref.precision, ref.model, ref.batch)
            and not _differences(r, ref.options) and not getattr(r, "stated_unmodelled", "")]


def _skip_reason(r):
    """Why multi-rank DDP run `r` (reader.Run) is not predicted (str), or None."""
    if r.allreduce not in ("nccl", CE_TRANSPORT):
        return "--allreduce %s: the predictor models nccl and copy-engine only; not predicted" % r.allreduce
    if r.allreduce == CE_TRANSPORT:
        try:
            comm_streams_of(r)
        except ResultsError:
            return ("--allreduce copy-engine, and the file does not record its comm-stream count (a build before "
                    "--comm-streams; the streams were set at build time or by environment then); not predicted")
    if not np.asarray(r.data("buckets/bytes_sent")).any():
        return "buckets/bytes_sent is 0 everywhere (the file records no communication: %.2f steps/s); not predicted" % (
            r.summary("steps_per_second"))
    return None


def load_stream_table(path):
    """The --comm-streams-table CSV: what the comm streams of runs were whose files do not record
    them (builds before --comm-streams). Header `folder,run,comm_streams,unmodelled,evidence`
    (lines starting with # skipped); folder: a --validate argument as given, run: a run's label
    there or `*` for every run of the folder; comm_streams: an integer in [1, 4], or `-` for a run
    not to predict (evidence then says why); unmodelled: what else differs from the reference that
    the model does not represent (may be empty). Returns {(normalised folder, run): (int or None,
    unmodelled str, evidence str)}; ResultsError naming the file and line for anything else."""
    import csv
    out = {}
    try:
        with open(path, newline="") as f:
            lines = [(i, row) for i, row in enumerate(csv.reader(f), 1) if row and not row[0].startswith("#")]
    except OSError as e:
        raise ResultsError("--comm-streams-table %s: cannot read (%s)" % (path, e))
    if not lines or lines[0][1] != ["folder", "run", "comm_streams", "unmodelled", "evidence"]:
        raise ResultsError("--comm-streams-table %s: expected the header folder,run,comm_streams,unmodelled,evidence"
                           % path)
    for i, row in lines[1:]:
        if len(row) != 5 or not (row[2] == "-" or row[2] in ("1", "2", "3", "4")) or not row[4].strip():
            raise ResultsError("--comm-streams-table %s: line %d: expected folder,run,comm_streams (1-4 or -),"
                               "unmodelled,evidence (not empty)" % (path, i))
        out[(os.path.normpath(row[0]), row[1])] = (None if row[2] == "-" else int(row[2]), row[3], row[4])
    return out


def _stated(table, folder, label):
    """The --comm-streams-table entry (load_stream_table's value) of run `label` of --validate
    argument `folder`: its own row, else the folder's `*` row, else None."""
    key = os.path.normpath(folder)
    return table.get((key, label), table.get((key, "*")))


def machine_of(run):
    """What a run's link times depend on besides its buckets, as a hashable tuple: (GPU names,
    the NCCL version from the attribute `versions`, the nccl_transport strings without the
    copy-engine all-reduce's comm-stream count - a setting the model covers, not the link -, ranks);
    None when the file records no device_names or no NCCL version (then no run counts as the same
    machine)."""
    names = run.attr("device_names", None)
    nccl = re.search(r"NCCL [0-9][0-9.]*", text(run.attr("versions", "")))
    if names is None or not nccl:
        return None
    names = tuple(sorted({text(x) for x in np.asarray(names).reshape(-1)}))
    links = tuple(sorted({re.sub(r"\d+ comm streams?", "N comm streams", t) for t in run.transports()}))
    return names, nccl.group(0), links, run.world_size


def _group_label(path, gk, table):
    """'ARGUMENT: transport, all-reduce, precision (table name)' of a validation group."""
    return "%s: %s, %s, %s (%s)" % (path, gk[0], gk[1], gk[2], table.name)


def lend_small_sizes(gk, table, fitted, machines, names):
    """`table` (the LinkTable of validation group `gk` = (transport, all-reduce, precision, ...)) with,
    per collective whose first row some other group's fitted table undercuts, that table's rows below
    it (LinkTable.with_small_sizes): among the groups of the same transport and all-reduce whose runs
    are all on one machine equal to `gk`'s (machines: {group: machine_of tuple or None}), the one with
    the smallest size, then the most rows below, then the first group. fitted: {group: LinkTable};
    names: {group: the lender's name in notes}. Returns the table itself when nothing is lent."""
    out = table
    if machines.get(gk) is None:
        return out
    for coll in COLLECTIVES:
        own = table.smallest(gk[0], coll)
        if own is None:
            continue
        cands = []
        for i, (k, t) in enumerate(fitted.items()):
            low = t.smallest(gk[0], coll)
            if k != gk and k[:2] == gk[:2] and machines.get(k) == machines[gk] and low is not None and low < own:
                below = sum(1 for b in t.sizes(gk[0], coll) if b < own)
                cands.append((low, -below, i, k))
        if cands:
            k = min(cands)[3]
            out = out.with_small_sizes(LinkTable(fitted[k].rows, names[k]), (coll,))
    return out


def validate(paths, tmp, leave_one_out=False, streams=None):
    """Predicts every multi-rank NCCL and copy-engine run of `paths` from one reference per group
    (the --validate argument it came from, transport, all-reduce, precision, model, batch): the 25 MiB,
    no-compression, overlapped run with the fewest unmodelled option differences (ties: fewer
    unmodelled options away from their defaults, then the path); the link table fitted from the
    group's runs, with the small sizes of another group of the same machine where the group measured
    none that small (lend_small_sizes); the 1-GPU no-DDP run of the same argument and precision as
    baseline; the cost of the fp16/bf16 casts on backward (predict_core.fit_cast_cost) from the
    group's runs that cast_references admits; with `leave_one_out`, each run's link table and cast
    cost are fitted without that run (the lent rows still from the other groups' full tables). `streams`: load_stream_table's dict
    (None: empty) - a run with an entry takes its comm streams where its file records none, and
    its unmodelled text among the row's unmodelled differences; an entry `-` leaves the run out.
    Runs that cannot be predicted are named in the notes, per argument and reason.
    Returns (rows list of dict, each with `small_calls`: _small_calls' list, and `cast_cost`: the
    CastCost.describe() its prediction used, in a list, or none; tables {(argument,
    transport, all-reduce, precision): LinkTable}, notes list of str)."""
    groups, singles, skipped, runs = _collect_runs(paths, tmp, streams or {})
    notes = []
    plans, fitted, machines, lenders = _plan_references(groups, paths, notes)
    rows, tables = [], {}
    for gk, members, ref_run, name, shares in plans:
        ref = Reference.from_run(ref_run)
        base = singles.get((gk[-1],) + gk[2:-1], [])
        base = min(base, key=lambda r: (len(_differences(r, ref.options)), r.path)) if base else None
        baseline = Baseline.from_run(base) if base else None
        table = lend_small_sizes(gk, fitted[gk], fitted, machines, lenders)
        tables[(paths[gk[-1]],) + gk[:3]] = table
        casts = cast_references(members, ref)
        for r in members:
            sc = _scenario_of(r, gk[0])
            own = table
            if leave_one_out and len(members) > 1:
                own = fit_link_table([m for m in members if m is not r], name + " without this run", shares)
                own = lend_small_sizes(gk, own, fitted, machines, lenders)
            own.clear_used()
            cast = fit_cast_cost(ref, baseline, [c for c in casts if not leave_one_out or c[0] != r.label], own)
            p = predict(ref, sc, own, baseline, cast)
            meas = r.summary("steps_per_second")
            mexp, mbwd = _measured_medians(r)
            diffs = _differences(r, ref.options) + [u for u in [getattr(r, "stated_unmodelled", "")] if u]
            rows.append({"run": r.label, "origin": paths[gk[-1]], "transport": gk[0], "precision": gk[2],
                         "allreduce": gk[1], "cap_mb": r.bucket_cap_mb, "compression": r.compression,
                         "overlap": r.overlap, "comm_streams": sc.comm_streams,
                         "reference": r.path == ref.path, "baseline": base.label if base else "",
                         "measured": meas, "predicted": p.steps_per_second,
                         "error": p.steps_per_second / meas - 1.0, "backward_measured": mbwd,
                         "backward_predicted": p.backward, "exposed_measured": mexp, "exposed_predicted": p.exposed,
                         "unmodelled": diffs, "reference_run": ref_run.label,
                         "small_calls": _small_calls(own),
                         "cast_cost": [cast.describe()] if cast and r.compression in CASTS else []})
    for (p, why), labels in sorted(skipped.items()):
        notes.append("%s: %s (%d run%s: %s)" % (p, why, len(labels), "" if len(labels) == 1 else "s",
                                                ", ".join(sorted(labels))))
    for r in runs:
        r.close()
    return rows, tables, notes


def _collect_runs(paths, tmp, streams):
    """validate's runs of `paths` (opened; the caller closes `runs`): (groups {(transport, all-reduce,
    precision, model, batch, argument index): multi-rank DDP runs it predicts}, singles {(argument
    index, precision, model, batch): 1-GPU no-DDP runs, the baselines}, skipped {(argument, reason):
    labels}, runs: every run opened). `streams`: load_stream_table's dict."""
    groups, singles, skipped, runs = {}, {}, {}, []
    for origin, p in enumerate(paths):
        for f, lab in unpack([p], tmp):
            r = Run(f)
            r.label = lab
            runs.append(r)
            key = (origin, r.precision, r.model, r.batch_size)
            stated = _stated(streams, p, lab)
            if stated:
                r.stated_comm_streams, r.stated_unmodelled = stated[0], stated[1]
            if r.world_size == 1 and not r.ddp:
                singles.setdefault(key, []).append(r)
            elif r.world_size == 1 or not r.ddp or not r.has("buckets/allreduce_start"):
                continue
            elif stated and stated[0] is None:
                skipped.setdefault((p, "%s (--comm-streams-table); not predicted" % stated[2]), []).append(r.label)
            elif why := _skip_reason(r):
                skipped.setdefault((p, why), []).append(r.label)
            else:
                groups.setdefault((transport_of(r), r.allreduce) + key[1:] + (origin,), []).append(r)
    return groups, singles, skipped, runs


def _plan_references(groups, paths, notes):
    """Per group (sorted): its reference run (25 MiB, no compression, overlapped; the fewest unmodelled
    differences from the group's runs, then the fewest options away from their defaults, then the
    path) and the link table fitted from all its runs. Returns (plans [(group, members, reference
    run, table name, copy-engine RunShares by path)], fitted {group: LinkTable}, machines {group:
    machine or None}, lenders {group: label}); a group without a reference is named in `notes`."""
    plans, fitted, machines, lenders = [], {}, {}, {}
    for gk, members in sorted(groups.items()):
        cands = [r for r in members if r.compression == "none" and r.overlap and r.bucket_cap_mb == 25]
        if not cands:
            notes.append("%s: no 25 MiB no-compression overlapped run to serve as reference; not predicted" % (gk,))
            continue
        others = [r.options() for r in members]
        # ties: the run with fewer unmodelled options away from their defaults, then the path
        ref_run = min(cands, key=lambda r: (sum(len(_differences(r, o)) for o in others),
                                            len(_option_differences(r.options(), {})), r.path))
        name = "fitted from %d %s runs" % (len(members), gk[0])
        shares = {r.path: RunShares.from_run(r) for r in members if r.allreduce == CE_TRANSPORT}
        fitted[gk] = fit_link_table(members, name, shares)
        one = {machine_of(r) for r in members}
        machines[gk] = one.pop() if len(one) == 1 else None
        lenders[gk] = _group_label(paths[gk[-1]], gk, fitted[gk])
        plans.append((gk, members, ref_run, name, shares))
    return plans, fitted, machines, lenders


def _scenario_of(r, transport):
    """The Scenario run `r` ran: its ranks, bucket cap and first bucket, compression, overlap,
    PowerSGD settings, precision, DDP or ZeRO-1 and comm streams, over `transport`."""
    return Scenario(ranks=r.world_size, transport=transport, cap_mb=r.bucket_cap_mb,
                    first_mb=float(r.option("first-bucket-mb", "1")), compression=r.compression,
                    overlap=r.overlap, powersgd_rank=int(r.option("powersgd-rank", "1")),
                    powersgd_rate=float(r.option("powersgd-min-compression-rate", "2")), precision=r.precision,
                    mode="zero1" if r.option("shard-optimizer", "false").lower() in ("true", "1", "on") else "ddp",
                    # files from before --allgather-dtype gathered fp32
                    allgather_dtype=r.option("allgather-dtype", "fp32"), comm_streams=comm_streams_of(r))


def _measured_medians(r):
    """(exposed communication, backward) of run `r`, s: medians over its timed steps of the slowest
    rank's time in each step."""
    t = r.timed()
    return tuple(float(np.median(np.asarray(r.step_series(name), dtype=float)[:, t].max(axis=0)))
                 for name in ("timing/exposed_comm", "timing/backward"))


def _small_calls(table):
    """What priced the calls of the last prediction below `table`'s own rows (list of str, one per
    transport and collective): borrowed rows (LinkTable.with_small_sizes) or the first row held."""
    out = []
    for key in sorted(table.borrowed_used):
        own, lender, sizes = table.borrowed[key]
        out.append("%s calls below %d bytes (the group's smallest measured) priced from the rows at %s bytes of %s, "
                   "a group of the same transport and all-reduce on the same GPUs, NCCL version and link (alpha and "
                   "busbw interpolated in log2(bytes) between those rows and the group's first row)" % (
                       key[1], own, ", ".join("%d" % b for b in sizes), lender))
    for key in sorted(table.held_used - table.borrowed_used):
        out.append("%s calls below %d bytes (the group's smallest measured) at that row's alpha and busbw: no "
                   "group of the same transport and machine measured smaller" % (key[1], table.smallest(key[0], key[1])))
    return out


# |predicted / measured - 1| per transport (the copy-engine all-reduce runs over NVLink)
TARGETS = (("nvlink", 0.05), ("copy-engine", 0.05), ("shm", 0.05), ("net", 0.10))


def _group_of(r):
    """A validation row's group: (argument, transport, all-reduce, precision)."""
    return r["origin"], r["transport"], r["allreduce"], r["precision"]


def _short(r):
    """A row's run named with the last folder of its argument (labels repeat across arguments)."""
    return "%s/%s" % (os.path.basename(os.path.normpath(r["origin"])), r["run"])


def validation_text(rows, tables, notes, command, leave_one_out=False):
    """The validation report (Markdown): one table per group, the targets, the fitted link tables."""
    out = ["# Predicted against measured steps/s per GPU", "",
           "Made by `%s`." % command, "",
           "Each run predicted from one reference run of its group (folder, transport, all-reduce, precision) - marked "
           "**ref** - the link table fitted from the group's runs (below) and the group's 1-GPU no-DDP run as "
           "baseline for backward's slowdown (for the copy-engine all-reduce's fp16/bf16 casts a coefficient of their "
           "own, from the group's runs with that compression, named under the group's table)%s. A call smaller "
           "than any the group measured takes, per collective, the rows below that size of another group's table of "
           "the same transport and all-reduce on the same GPUs, NCCL version and link where one measured smaller "
           "(else the group's first row); the runs that needed it are named under their group's table. Times: "
           "medians over the timed steps of the slowest rank (ms). "
           "*unmodelled*: options that differ from the reference and that the model does not represent; those rows "
           "do not count against the targets." % (
               " (leave one out: each run's link table and cast coefficient fitted without that run)" if leave_one_out
               else ""), ""]
    groups = []
    for r in rows:
        if _group_of(r) not in groups:
            groups.append(_group_of(r))
    for g in groups:
        rs = [r for r in rows if _group_of(r) == g]
        out += ["## %s: %s, %s, %s (reference %s, baseline %s)" % (g + (rs[0]["reference_run"], rs[0]["baseline"] or "none")), "",
                "| run | cap MiB | compression | measured steps/s | predicted | error | backward ms meas / pred | "
                "exposed ms meas / pred | unmodelled |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in sorted(rs, key=lambda r: r["run"]):
            out.append("| %s%s | %g | %s%s | %.2f | %.2f | %+.1f%% | %.2f / %.2f | %.2f / %.2f | %s |" % (
                r["run"], " **ref**" if r["reference"] else "", r["cap_mb"], r["compression"],
                ("" if r["overlap"] else ", no overlap") + ("" if r["allreduce"] != CE_TRANSPORT else ", %d comm stream%s" % (
                    r["comm_streams"], "" if r["comm_streams"] == 1 else "s")),
                r["measured"], r["predicted"], 100 * r["error"],
                1e3 * r["backward_measured"], 1e3 * r["backward_predicted"], 1e3 * r["exposed_measured"],
                1e3 * r["exposed_predicted"], ", ".join(r["unmodelled"])))
        out.append("")
        for key, what in (("small_calls", "Small calls"), ("cast_cost", "The casts' cost on backward")):
            said = {}
            for r in sorted(rs, key=lambda r: r["run"]):
                for s in r[key]:
                    said.setdefault(s, []).append(r["run"])
            for s, runs in said.items():
                out += ["%s of %s: %s." % (what, ", ".join(runs), s), ""]
    out += ["## Targets", "", "| transport | target | modelled runs | within target | worst |",
            "| --- | --- | --- | --- | --- |"]
    for tr, tgt in TARGETS:
        rs = [r for r in rows if r["transport"] == tr and not r["unmodelled"]]
        if not rs:
            continue
        ok = sum(abs(r["error"]) <= tgt for r in rs)
        worst = max(rs, key=lambda r: abs(r["error"]))
        out.append("| %s | %.0f%% | %d | %d | %s %+.1f%% |" % (tr, 100 * tgt, len(rs), ok, _short(worst), 100 * worst["error"]))
    out += ["", "## Fitted link tables", ""]
    for g, t in tables.items():
        out += ["%s: %s (%s):" % (g[0], ", ".join(g[1:]), t.name), "", "```", t.to_csv().rstrip(), "```", ""]
    if notes:
        out += ["Notes:", ""] + ["- " + n for n in notes] + [""]
    return "\n".join(out)


def validation_plot(rows, path):
    """Predicted against measured steps/s, one colour per transport, the +-5% / +-10% bands."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 6))
    hi = max(max(r["measured"], r["predicted"]) for r in rows) * 1.1
    x = np.array([0, hi])
    ax.plot(x, x, "k-", lw=0.8, label="predicted = measured")
    for f, ls in ((0.05, "--"), (0.10, ":")):
        ax.plot(x, x * (1 + f), "k" + ls, lw=0.6, label="+-%d%%" % (100 * f))
        ax.plot(x, x * (1 - f), "k" + ls, lw=0.6)
    for tr, c in (("nvlink", "tab:green"), ("copy-engine", "tab:purple"), ("shm", "tab:blue"), ("net", "tab:red")):
        for unm, marker in ((False, "o"), (True, "x")):
            rs = [r for r in rows if r["transport"] == tr and bool(r["unmodelled"]) == unm]
            if rs:
                ax.scatter([r["measured"] for r in rs], [r["predicted"] for r in rs], c=c, marker=marker,
                           label="%s%s" % (tr, " (unmodelled option)" if unm else ""))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured steps/s per GPU")
    ax.set_ylabel("predicted steps/s per GPU")
    ax.set_title("predicted against measured, one reference run per group", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def parser(prog):
    ap = argparse.ArgumentParser(prog=prog, description=(
        "What-if prediction of a vitddp configuration from one results file: the comm stream in bucket order "
        "(each collective at the later of its bucket's gradient-ready time and the previous one's end), "
        "collective time alpha + bytes x factor / busbw from a link table, backward's slowdown measured against "
        "a 1-GPU --baseline. Prints step time, exposed communication, steps/s per GPU, the dominant term and "
        "every assumption."))
    ap.add_argument("reference", nargs="?", metavar="REF.h5", help="reference results file (a DDP run of the model)")
    ap.add_argument("--baseline", metavar="ONE_GPU.h5", help="1-GPU run without DDP: backward without traffic")
    ap.add_argument("--link-table", metavar="CSV", help="link table (format: README); default: H200 figures of docs/benchmarks.md")
    ap.add_argument("--fit-link", nargs="+", metavar="RUN.h5", help="fit the link table from these runs' buckets instead")
    ap.add_argument("--small-link-table", metavar="CSV", help="a link table of the same transport and machine that "
                    "measured smaller calls: per collective, its rows below the link table's first row are used there "
                    "(interpolated up to it); without it a call below the first row takes that row (both printed)")
    ap.add_argument("--write-link-table", metavar="CSV", help="write the link table used (default or fitted, with "
                    "--small-link-table's rows) to CSV")
    ap.add_argument("--ranks", type=int, help="ranks N [the reference's]")
    ap.add_argument("--transport", help="link-table transport, e.g. nvlink, shm, net, copy-engine [the reference's]")
    ap.add_argument("--comm-streams", metavar="auto|N", help="transport copy-engine: the comm streams the buckets "
                    "alternate over, as vitddp's option (auto: 2 under bf16 without compression, else 1) [the "
                    "reference's]")
    ap.add_argument("--bucket-cap-mb", type=float, help="bucket cap, MiB [the reference's]")
    ap.add_argument("--first-bucket-mb", type=float, help="first bucket, MiB [the reference's]")
    ap.add_argument("--compression", choices=["none", "fp16", "bf16", "powersgd"], help="[the reference's]")
    ap.add_argument("--powersgd-rank", type=int, help="PowerSGD rank [the reference's option]")
    ap.add_argument("--powersgd-rate", type=float, help="PowerSGD min compression rate [the reference's option]")
    ap.add_argument("--mode", choices=["ddp", "zero1"], default="ddp", help="ddp: all-reduce; zero1: reduce-scatter + "
                    "parameter all-gather, optimizer on 1/N [ddp]")
    ap.add_argument("--allgather-dtype", choices=["auto", "fp32", "bf16"], default=None, help="--mode zero1: the "
                    "dtype of the parameter all-gather, as vitddp's option (auto: bf16 for a bf16 reference on more than "
                    "one rank) [auto]")
    ap.add_argument("--no-overlap", action="store_true", help="all buckets after backward")
    ap.add_argument("--json", action="store_true", help="JSON instead of Markdown")
    ap.add_argument("--validate", nargs="+", metavar="DIR_OR_TAR", help="predict every multi-rank run found there "
                    "from one reference per transport and compare with its measured steps/s")
    ap.add_argument("--leave-one-out", action="store_true", help="with --validate: fit each run's link table "
                    "without that run")
    ap.add_argument("--plot", metavar="PNG", help="with --validate: predicted against measured")
    ap.add_argument("--comm-streams-table", metavar="CSV", help="with --validate: the comm streams of copy-engine "
                    "runs whose files do not record them (builds before --comm-streams), per folder and run, with "
                    "the evidence (format: README)")
    ap.add_argument("-o", "--output", metavar="FILE", help="also write the report to FILE")
    return ap


def main(argv=None, prog="vitddp-report predict"):
    """Entry point of `vitddp-report predict`; returns the exit status (ResultsError propagates to report.py)."""
    a = parser(prog).parse_args(argv)
    check_outputs(a, {"output": "-o", "write_link_table": "--write-link-table", "plot": "--plot"})
    if not a.validate:
        for opt, given in (("--plot", a.plot), ("--leave-one-out", a.leave_one_out),
                           ("--comm-streams-table", a.comm_streams_table)):
            if given:
                raise ResultsError("%s: only with --validate" % opt)
    if a.fit_link and a.link_table:
        raise ResultsError("--fit-link: not with --link-table (the link table comes from one of them)")
    for opt, v in (("--powersgd-rate", a.powersgd_rate), ("--bucket-cap-mb", a.bucket_cap_mb),
                   ("--first-bucket-mb", a.first_bucket_mb)):
        if v is not None and not (math.isfinite(v) and v > 0):
            raise ResultsError("%s %s: must be a finite number > 0" % (opt, v))
    if a.validate:
        with tempfile.TemporaryDirectory() as tmp:
            streams = load_stream_table(a.comm_streams_table) if a.comm_streams_table else None
            rows, tables, notes = validate(a.validate, tmp, a.leave_one_out, streams)
        if not rows:
            raise ResultsError("--validate: no group with a reference run")
        cmd = "vitddp-report predict --validate %s%s%s" % (
            " ".join(a.validate), " --leave-one-out" if a.leave_one_out else "",
            " --comm-streams-table %s" % a.comm_streams_table if a.comm_streams_table else "")
        write_output(validation_text(rows, tables, notes, cmd, a.leave_one_out), a.output)
        if a.plot:
            validation_plot(rows, a.plot)
        return 0
    table = None
    if a.fit_link:
        runs = _open_all(a.fit_link)
        table = fit_link_table(runs, "fitted from %d runs" % len(runs))
    elif a.link_table:
        table = load_table(a.link_table)
    else:
        table = default_table()
    if a.small_link_table:
        table = table.with_small_sizes(load_table(a.small_link_table, "--small-link-table"))
    if a.write_link_table:
        write_text(a.write_link_table, table.to_csv(), "--write-link-table")
    if not a.reference:
        if a.write_link_table:
            return 0
        raise ResultsError("predict: give a reference results file (or --validate DIR)")
    with Run(a.reference) as run:
        ref = Reference.from_run(run)
    baseline = None
    if a.baseline:
        with Run(a.baseline) as b:
            baseline = Baseline.from_run(b, ref)
    if a.allgather_dtype is not None and a.mode != "zero1":
        raise ResultsError("--allgather-dtype %s: has no effect without --mode zero1 (DDP all-reduces the gradients)"
                           % a.allgather_dtype)
    sc = _scenario(a, ref)
    if sc.ranks > 1 and not table.has(sc.transport, "allreduce" if sc.mode == "ddp" else "reducescatter") \
            and not table.has(sc.transport, "allreduce"):
        who = "--transport %s" % sc.transport if a.transport else "the reference's transport '%s'" % sc.transport
        raise ResultsError("%s: the link table %s has no row for it (give --transport with one of its transports, "
                           "--link-table or --fit-link)" % (who, table.name))
    cast = fit_cast_cost(ref, baseline, cast_references(runs, ref), table) if a.fit_link else None
    p = predict(ref, sc, table, baseline, cast)
    if a.json:
        import json
        write_output(json.dumps(prediction_dict(p), indent=1) + "\n", a.output)
    else:
        write_output(prediction_text(p), a.output)
    return 0
