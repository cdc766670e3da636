"""Link tables of `vitddp-report predict`: the time of one collective call, or of one bucket's
compression work, as alpha + bytes x factor / bandwidth.

File format (CSV, a header line, `#` comment lines allowed), one row per (transport, collective[,
size]):

    transport,collective,bytes,alpha_us,busbw_GBps
    nvlink,allreduce,16777216,0,223
    nvlink,allreduce,268435456,0,299

  transport    free text matched case-insensitively (e.g. nvlink, shm, net); `*` matches any;
  collective   allreduce, reducescatter, allgather (nccl-tests' names) - or a compression's own work
               on the comm stream: cast (fp16/bf16: divide, cast, cast back), powersgd (its GEMMs and
               orthogonalisation), whose bytes are the bucket's uncompressed fp32 bytes and factor 1 -
               or concurrency: the copy-engine all-reduce's gain from buckets in flight on several
               comm streams (predict_ce), a dimensionless G in the busbw_GBps column (alpha unused),
               bytes = the all-reduce payload; without such rows G = 1;
  bytes        message size of the row (empty: every size). Several rows of one (transport,
               collective) form a curve: alpha and busbw are interpolated linearly in log2(bytes)
               between them, and held constant beyond the first and the last;
  alpha_us     latency per call, microseconds;
  busbw_GBps   nccl-tests' bus bandwidth (doc/PERFORMANCE.md), GB/s = 1e9 bytes/s.

time(bytes) = alpha + bytes x factor(n) / busbw, factor = 2(n-1)/n for all-reduce, (n-1)/n for
reduce-scatter and all-gather (bandwidth.BUS_FACTOR), 1 for cast and powersgd. A reduce-scatter or
all-gather without rows of its own takes the all-reduce's rows (NCCL's ring moves the same busbw in
each); the prediction prints that assumption.
"""
import csv
import io
import math
from dataclasses import dataclass

import numpy as np

from .bandwidth import bus_factor
from .reader import ResultsError

GB = 1e9
COLLECTIVES = ("allreduce", "reducescatter", "allgather")
WORK = ("cast", "powersgd")
GAIN = "concurrency"

# docs/benchmarks.md, 2 x H200 (NV18), NCCL 2.28.3 all-reduce of fp32 (nccl-tests' busbw at 16 MiB,
# 256 MiB, 1 GiB). Those are effective figures (latency included), hence alpha 0.
H200_DEFAULT = """# 2 x H200, NCCL 2.28.3 all-reduce busbw (docs/benchmarks.md); alpha 0: the busbw figures include latency
transport,collective,bytes,alpha_us,busbw_GBps
nvlink,allreduce,16777216,0,223
nvlink,allreduce,268435456,0,299
nvlink,allreduce,1073741824,0,330
shm,allreduce,16777216,0,27
shm,allreduce,268435456,0,27.5
shm,allreduce,1073741824,0,27.8
net,allreduce,16777216,0,2.7
net,allreduce,268435456,0,2.9
net,allreduce,1073741824,0,3.1
"""


@dataclass
class Row:
    """One row of a link table (see the module doc); `nbytes` None = every size."""
    transport: str
    collective: str
    nbytes: float
    alpha_s: float
    busbw_gbps: float
    source: str = ""


class LinkTable:
    """A set of Rows with `time(transport, collective, nbytes, ranks)` (seconds) and `notes`
    (assumptions taken while answering, list of str)."""

    def __init__(self, rows, name=""):
        self.rows, self.name, self.notes = list(rows), name, []

    def _rows(self, transport, collective):
        t = transport.lower()
        exact = [r for r in self.rows if r.collective == collective and r.transport.lower() == t]
        return exact or [r for r in self.rows if r.collective == collective and r.transport == "*"]

    def has(self, transport, collective):
        """True when the table has rows for (transport, collective)."""
        return bool(self._rows(transport, collective))

    def params(self, transport, collective, nbytes):
        """(alpha s, busbw GB/s) at message size `nbytes` (see the module doc); ResultsError when
        the table has no row for them (reduce-scatter/all-gather fall back to all-reduce)."""
        rows = self._rows(transport, collective)
        if not rows and collective in ("reducescatter", "allgather"):
            rows = self._rows(transport, "allreduce")
            note = "%s over %s: the all-reduce's alpha and busbw (the table has no %s rows)" % (
                collective, transport, collective)
            if rows and note not in self.notes:
                self.notes.append(note)
        if not rows:
            raise ResultsError("link table %s: no row for transport '%s', collective '%s' (transports: %s)" % (
                self.name, transport, collective, ", ".join(sorted({r.transport for r in self.rows}))))
        sized = sorted((r for r in rows if r.nbytes), key=lambda r: r.nbytes)
        if not sized:
            return rows[0].alpha_s, rows[0].busbw_gbps
        x = math.log2(max(nbytes, 1.0))
        xs = [math.log2(r.nbytes) for r in sized]
        return (float(np.interp(x, xs, [r.alpha_s for r in sized])),
                float(np.interp(x, xs, [r.busbw_gbps for r in sized])))

    def gain(self, transport, nbytes):
        """The copy-engine concurrency gain G at all-reduce payload `nbytes` (float > 0; interpolated
        as params() does): 1.0 when the table has no concurrency row for `transport`."""
        if not self._rows(transport, GAIN):
            return 1.0
        return self.params(transport, GAIN, nbytes)[1]

    def time(self, transport, collective, nbytes, ranks):
        """Seconds of one call moving `nbytes` (per rank) on `ranks` ranks; 0 for 0 bytes or one
        rank of a collective."""
        if nbytes <= 0:
            return 0.0
        if collective in COLLECTIVES:
            if ranks < 2:
                return 0.0
            factor = bus_factor(ranks, collective)
        else:
            factor = 1.0
        alpha, bw = self.params(transport, collective, nbytes)
        return alpha + nbytes * factor / (bw * GB)

    def to_csv(self):
        """The table in the file format of the module doc (str)."""
        out = io.StringIO()
        out.write("transport,collective,bytes,alpha_us,busbw_GBps\n")
        for r in self.rows:
            out.write("%s,%s,%s,%.3f,%.4g\n" % (r.transport, r.collective, "" if not r.nbytes else "%d" % r.nbytes,
                                               r.alpha_s * 1e6, r.busbw_gbps))
        return out.getvalue()


def parse_table(text, name):
    """A LinkTable from CSV `text` (module doc); ResultsError naming `name` and the line for a bad row."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    if not lines:
        raise ResultsError("link table %s: empty" % name)
    reader = csv.DictReader(lines)
    need = {"transport", "collective", "alpha_us", "busbw_GBps"}
    if not need <= set(reader.fieldnames or []):
        raise ResultsError("link table %s: the header must name %s (got %s)" % (
            name, ", ".join(sorted(need)), ",".join(reader.fieldnames or [])))
    rows = []
    for i, d in enumerate(reader, start=2):
        try:
            coll = d["collective"].strip().lower().replace("-", "").replace("_", "")
            if coll not in COLLECTIVES + WORK + (GAIN,):
                raise ValueError("collective '%s' is not one of %s" % (
                    d["collective"], ", ".join(COLLECTIVES + WORK + (GAIN,))))
            nb = (d.get("bytes") or "").strip()
            bw = float(d["busbw_GBps"])
            alpha = float(d["alpha_us"]) * 1e-6
            if not bw > 0 or alpha < 0 or (nb and not float(nb) > 0):
                raise ValueError("busbw must be > 0, alpha >= 0, bytes > 0")
            rows.append(Row(d["transport"].strip(), coll, float(nb) if nb else None, alpha, bw, name))
        except (ValueError, TypeError, AttributeError) as e:
            raise ResultsError("link table %s, data row %d: %s" % (name, i - 1, e))
    return LinkTable(rows, name)


def load_table(path):
    """The LinkTable of CSV file `path`; ResultsError naming it when missing or malformed."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise ResultsError("--link-table %s: %s" % (path, e.strerror or e))
    return parse_table(text, path)


def default_table():
    """The H200 table of docs/benchmarks.md (H200_DEFAULT)."""
    return parse_table(H200_DEFAULT, "h200-default")


def fit_alpha_beta(nbytes, seconds, factor=1.0):
    """Least-squares fit of seconds = alpha + nbytes x factor / bw, each point weighted by 1/seconds
    (relative error). Arrays float [k], k >= 1. Returns (alpha s >= 0, bw GB/s); with fewer than two
    distinct sizes, or a negative alpha, alpha is 0 and bw the bytes-weighted mean."""
    b = np.asarray(nbytes, dtype=float) * factor
    t = np.asarray(seconds, dtype=float)
    ok = (b > 0) & (t > 0)
    b, t = b[ok], t[ok]
    if b.size == 0:
        raise ResultsError("link fit: no bucket with a recorded time")
    if np.unique(np.round(np.log2(b), 1)).size >= 2:
        a = np.stack([1.0 / t, b / t], axis=1)
        (alpha, inv), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
        if alpha >= 0 and inv > 0:
            return float(alpha), float(1.0 / inv / GB)
    return 0.0, float(b.sum() / t.sum() / GB)


def curve_rows(transport, collective, nbytes, seconds, factor, source, group_ratio=1.3):
    """Rows of a fitted curve: one alpha (fit_alpha_beta over every point) and, per group of sizes
    within `group_ratio` of each other, the busbw that reproduces that group's median time:
    busbw = median bytes x factor / (median seconds - alpha). list of Row."""
    nbytes, seconds = np.asarray(nbytes, dtype=float), np.asarray(seconds, dtype=float)
    ok = (nbytes > 0) & (seconds > 0)
    nbytes, seconds = nbytes[ok], seconds[ok]
    alpha, _ = fit_alpha_beta(nbytes, seconds, factor)
    order = np.argsort(nbytes)
    nbytes, seconds = nbytes[order], seconds[order]
    groups, cur = [], [0]
    for i in range(1, nbytes.size):
        if nbytes[i] > nbytes[cur[0]] * group_ratio:
            groups.append(cur)
            cur = []
        cur.append(i)
    groups.append(cur)
    rows = []
    for g in groups:
        b, t = float(np.median(nbytes[g])), float(np.median(seconds[g]))
        a = min(alpha, 0.5 * t)
        rows.append(Row(transport, collective, b, a, b * factor / (t - a) / GB, source))
    return rows
