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

Small sizes: a curve is held constant below its first row, so a table fitted from runs whose smallest
all-reduce was 2 MB gives a 4 KB call the 2 MB row's alpha (22 us on 2 x H200 NVLink, where 2-4 KiB
calls measured 9-15 us): NCCL's small-message latency (its LL protocol) is not visible in MB-sized
buckets, neither in that row nor in an alpha-beta line through them. LinkTable.with_small_sizes takes the rows below a collective's
first row from a second table measured on the same transport and machine (e.g. one fitted from
runs with KB-sized buckets) and interpolates between the two as within one curve; every call
below a curve's first row, and every use of borrowed rows, is a printed assumption.
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
    (assumptions taken while answering, list of str). `borrowed`: {(transport lower-case,
    collective): (first own size, lender's name, [lent sizes])}, rows with_small_sizes took from
    another table; `borrowed_used` / `held_used`: the (transport lower-case, collective) pairs for
    which time() has priced a call with borrowed rows / below the curve's first row (sets;
    clear_used() empties them between predictions)."""

    def __init__(self, rows, name=""):
        self.rows, self.name, self.notes = list(rows), name, []
        self.borrowed, self.borrowed_used, self.held_used = {}, set(), set()

    def clear_used(self):
        """Empties borrowed_used and held_used."""
        self.borrowed_used.clear()
        self.held_used.clear()

    def _rows(self, transport, collective):
        t = transport.lower()
        exact = [r for r in self.rows if r.collective == collective and r.transport.lower() == t]
        return exact or [r for r in self.rows if r.collective == collective and r.transport == "*"]

    def _note(self, note):
        if note not in self.notes:
            self.notes.append(note)

    def has(self, transport, collective):
        """True when the table has rows for (transport, collective)."""
        return bool(self._rows(transport, collective))

    def _curve(self, transport, collective):
        """(rows, collective whose rows they are) for (transport, collective): reduce-scatter and
        all-gather without rows take the all-reduce's (noted); ResultsError when there are none."""
        rows = self._rows(transport, collective)
        if not rows and collective in ("reducescatter", "allgather"):
            rows = self._rows(transport, "allreduce")
            if rows:
                self._note("%s over %s: the all-reduce's alpha and busbw (the table has no %s rows)" % (
                    collective, transport, collective))
                collective = "allreduce"
        if not rows:
            raise ResultsError("link table %s: no row for transport '%s', collective '%s' (transports: %s)" % (
                self.name, transport, collective, ", ".join(sorted({r.transport for r in self.rows}))))
        return rows, collective

    def sizes(self, transport, collective):
        """Sorted bytes of the sized rows of (transport, collective) (list of float; no fallback to
        the all-reduce's rows here)."""
        return sorted(r.nbytes for r in self._rows(transport, collective) if r.nbytes)

    def smallest(self, transport, collective):
        """Bytes of the first sized row of (transport, collective) (float), None without one."""
        sized = self.sizes(transport, collective)
        return sized[0] if sized else None

    def params(self, transport, collective, nbytes):
        """(alpha s, busbw GB/s) at message size `nbytes` (see the module doc); ResultsError when
        the table has no row for them (reduce-scatter/all-gather fall back to all-reduce)."""
        rows, _ = self._curve(transport, collective)
        sized = sorted((r for r in rows if r.nbytes), key=lambda r: r.nbytes)
        if not sized:
            return rows[0].alpha_s, rows[0].busbw_gbps
        x = math.log2(max(nbytes, 1.0))
        xs = [math.log2(r.nbytes) for r in sized]
        return (float(np.interp(x, xs, [r.alpha_s for r in sized])),
                float(np.interp(x, xs, [r.busbw_gbps for r in sized])))

    def _note_small(self, transport, collective, nbytes):
        """Notes a call of `nbytes` below the curve's first row (held) or priced by borrowed rows."""
        rows, coll = self._curve(transport, collective)
        sized = sorted((r for r in rows if r.nbytes), key=lambda r: r.nbytes)
        key = (transport.lower(), coll)
        if sized and nbytes < sized[0].nbytes:
            r = sized[0]
            self.held_used.add(key)
            self._note("%s over %s: calls below %d bytes, the table's smallest row, take that row's alpha %.1f us and "
                       "busbw %.4g GB/s (held: nothing smaller measured%s)" % (
                           coll, transport, r.nbytes, r.alpha_s * 1e6, r.busbw_gbps,
                           "" if key in self.borrowed else "; --small-link-table lends measured small sizes"))
        if key in self.borrowed and nbytes < self.borrowed[key][0]:
            own, lender, sizes = self.borrowed[key]
            self.borrowed_used.add(key)
            self._note("%s over %s: calls below %d bytes, the smallest size of the link table's own rows (%s), priced "
                       "from the rows at %s bytes of %s, assumed the same transport and machine; alpha and busbw "
                       "interpolated in log2(bytes) between those and the %d-byte row" % (
                           coll, transport, own, self.name, ", ".join("%d" % b for b in sizes), lender, own))

    def with_small_sizes(self, lender, collectives=COLLECTIVES):
        """A copy of this table whose curve of each (transport, collective in `collectives`) with
        sized rows also holds `lender`'s (LinkTable) rows of the same pair below its first row
        (Row.source = lender.name; recorded in `borrowed`). Pairs the lender does not reach below
        stay as they are; the copy keeps `name` and the notes so far."""
        out = LinkTable(self.rows, self.name)
        out.notes, out.borrowed = list(self.notes), dict(self.borrowed)
        pairs = sorted({(r.transport, r.collective) for r in self.rows if r.collective in collectives and r.nbytes})
        for tr, coll in pairs:
            own = self.smallest(tr, coll)
            lent = sorted((r for r in lender._rows(tr, coll) if r.nbytes and r.nbytes < own), key=lambda r: r.nbytes)
            if lent and (tr.lower(), coll) not in out.borrowed:
                at = next(i for i, r in enumerate(out.rows) if (r.transport, r.collective) == (tr, coll))
                out.rows[at:at] = [Row(tr, coll, r.nbytes, r.alpha_s, r.busbw_gbps, lender.name) for r in lent]
                out.borrowed[(tr.lower(), coll)] = (own, lender.name, [r.nbytes for r in lent])
        return out

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
        self._note_small(transport, collective, nbytes)
        return alpha + nbytes * factor / (bw * GB)

    def to_csv(self):
        """The table in the file format of the module doc (str); borrowed rows (with_small_sizes)
        follow a `#` line naming their lender."""
        out = io.StringIO()
        out.write("transport,collective,bytes,alpha_us,busbw_GBps\n")
        lent = False
        for r in self.rows:
            own, lender, _ = self.borrowed.get((r.transport.lower(), r.collective), (0, None, None))
            now = r.source == lender and bool(r.nbytes) and r.nbytes < own
            if now != lent:
                out.write("# %s %s %s %d bytes: rows of %s\n" % (r.transport, r.collective, "below" if now else "from",
                                                                own, lender if now else self.name))
            lent = now
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
            empty = sorted(k for k in need if not (d.get(k) or "").strip())
            if empty:
                raise ValueError("no value in column %s" % ", ".join(empty))
            coll = d["collective"].strip().lower().replace("-", "").replace("_", "")
            if coll not in COLLECTIVES + WORK + (GAIN,):
                raise ValueError("collective '%s' is not one of %s" % (
                    d["collective"], ", ".join(COLLECTIVES + WORK + (GAIN,))))
            nb = (d.get("bytes") or "").strip()
            bw = float(d["busbw_GBps"])
            alpha = float(d["alpha_us"]) * 1e-6
            finite = math.isfinite(bw) and math.isfinite(alpha) and (not nb or math.isfinite(float(nb)))
            if not finite or not bw >= 1e-9 or alpha < 0 or (nb and not float(nb) > 0):
                raise ValueError("busbw_GBps must be a finite number >= 1e-9 (1 byte/s), alpha_us finite and "
                                 ">= 0, bytes finite and > 0")
            rows.append(Row(d["transport"].strip(), coll, float(nb) if nb else None, alpha, bw, name))
        except (ValueError, TypeError, AttributeError) as e:
            raise ResultsError("link table %s, data row %d: %s" % (name, i - 1, e))
    return LinkTable(rows, name)


def load_table(path, option="--link-table"):
    """The LinkTable of CSV file `path`; ResultsError naming `option` and the file when missing or
    malformed."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise ResultsError("%s %s: %s" % (option, path, e.strerror or e))
    except UnicodeDecodeError:
        raise ResultsError("%s %s: not a text (CSV) file" % (option, path))
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
