"""Communication bandwidth of vitddp's bucket all-reduces, as nccl-tests reports it.

Definitions (NVIDIA nccl-tests, doc/PERFORMANCE.md):
  algbw = bytes / time                            (GB/s, 1 GB = 1e9 bytes)
  busbw = algbw x factor, factor = 2(n-1)/n for all-reduce, (n-1)/n for reduce-scatter and
          all-gather (n ranks): the bandwidth of the busiest link, comparable with the hardware's.
For one bucket in one step:
  bytes = buckets/bytes_sent (the payload of the rank's all-reduce calls: fp32 numel x 4; a 16-bit
          compressed bucket numel x 2, what travels on the wire; PowerSGD its P and Q factors and the
          uncompressed tensors); files without bytes_sent: buckets/bytes (x 1/2 for fp16/bf16
          compression, unknown for PowerSGD);
  time  = buckets/allreduce_time (the summed events of the bucket's all-reduce calls) averaged
          over the ranks, as nccl-tests averages its operation time over the ranks.
A rank that reaches the all-reduce first also waits for its peer inside it, so the figure is a
lower bound of the link's bandwidth when ranks are skewed.
A run with --shard-optimizer (ZeRO-1, buckets/reduce_scattered) reduce-scatters its buckets: the
same series then describe the reduce-scatter, and the factor is (n-1)/n (gradient_collective).
One rank has no bus: busbw is None (nccl-tests prints 0, factor 0).
vitddp writes the same figures itself (docs/schema.md): buckets/busbw is per_rank_busbw() (each
rank's own bytes and time), summary/busbw_median is BucketBandwidth(run).median_busbw().
"""
import numpy as np

from .reader import ResultsError

GB = 1e9  # nccl-tests' GB/s

BUS_FACTOR = {  # collective -> factor(n) from nccl-tests doc/PERFORMANCE.md
    "allreduce": lambda n: 2.0 * (n - 1) / n,
    "reducescatter": lambda n: (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
}


def bus_factor(world_size, collective="allreduce"):
    """busbw / algbw for `collective` on `world_size` ranks (float; 0 for one rank).
    Raises ValueError for an unknown collective or world_size < 1."""
    if world_size < 1:
        raise ValueError("world_size must be >= 1, got %r" % world_size)
    return BUS_FACTOR[collective](world_size)


def gradient_collective(run):
    """The collective of the run's gradient buckets, a BUS_FACTOR key: "reducescatter" when
    buckets/reduce_scattered marks a bucket (--shard-optimizer, ZeRO-1), else "allreduce" (files
    without the series included)."""
    if run.has("buckets/reduce_scattered") and np.asarray(run.bucket_series("buckets/reduce_scattered")).any():
        return "reducescatter"
    return "allreduce"


def algbw_gbps(nbytes, seconds):
    """algbw in GB/s (1e9 bytes/s) of arrays or scalars; NaN where seconds <= 0."""
    nbytes = np.asarray(nbytes, dtype=float)
    seconds = np.asarray(seconds, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(seconds > 0, nbytes / np.where(seconds > 0, seconds, 1.0) / GB, np.nan)


def bucket_bytes(run):
    """Bytes on the wire per rank-0 step and bucket, float64 [steps, buckets] (see the module doc);
    ResultsError when the file has neither buckets/bytes_sent nor a usable buckets/bytes."""
    if run.has("buckets/bytes_sent"):
        return np.asarray(run.bucket_series("buckets/bytes_sent")[0], dtype=float)
    nsteps = run.step_series("steps/timed").shape[1]
    table = np.asarray(run.data("buckets/bytes"), dtype=float)
    scale = {"none": 1.0, "fp16": 0.5, "bf16": 0.5}.get(run.compression)
    if scale is None:
        raise ResultsError("%s: no dataset 'buckets/bytes_sent' and compression %s: the bytes on the wire "
                           "are unknown" % (run.path, run.compression))
    return np.broadcast_to(table * scale, (nsteps, table.size)).copy()


class BucketBandwidth:
    """Per step and bucket bandwidth of one run (all arrays float64 [steps, buckets], steps of the
    whole file; `timed` is the bool mask [steps] of the timed window):
      nbytes (bytes), seconds (mean over ranks of buckets/allreduce_time, s),
      algbw and busbw (GB/s; NaN where no all-reduce time was recorded; busbw None for one rank).
    `collective` (a BUS_FACTOR key) defaults to gradient_collective(run).
    ResultsError when the file has no buckets/allreduce_time (older files) or no buckets."""

    def __init__(self, run, collective=None):
        if not run.has("buckets/allreduce_time"):
            raise ResultsError("%s: missing dataset 'buckets/allreduce_time' (a file from before per-bucket "
                               "all-reduce times: no bandwidth)" % run.path)
        t = np.asarray(run.bucket_series("buckets/allreduce_time"), dtype=float)
        if t.shape[2] == 0:
            raise ResultsError("%s: no gradient buckets (a run without DDP): no bandwidth" % run.path)
        self.world_size = run.world_size
        self.timed = run.timed()
        self.seconds = t.mean(axis=0)
        self.nbytes = bucket_bytes(run)
        if self.nbytes.shape != self.seconds.shape:
            raise ResultsError("%s: buckets/bytes_sent %s and buckets/allreduce_time %s differ in shape"
                               % (run.path, self.nbytes.shape, t.shape))
        self.factor = bus_factor(self.world_size, collective or gradient_collective(run))
        self.algbw = algbw_gbps(self.nbytes, self.seconds)
        self.busbw = self.algbw * self.factor if self.world_size > 1 else None

    def per_bucket(self):
        """Medians over the timed steps, per bucket: dict of float64 [buckets] arrays
        nbytes, seconds, algbw, busbw (busbw None for one rank); NaN where never recorded."""
        sel = self.timed
        with np.errstate(all="ignore"):
            out = {"nbytes": np.nanmedian(self.nbytes[sel], axis=0),
                   "seconds": np.median(self.seconds[sel], axis=0),
                   "algbw": _nanmedian_cols(self.algbw[sel])}
        out["busbw"] = out["algbw"] * self.factor if self.busbw is not None else None
        return out

    def per_step(self):
        """Byte-weighted bandwidth of each step (all its recorded buckets together: total bytes /
        total all-reduce time), float64 [steps] arrays algbw and busbw (GB/s; busbw None for one
        rank); NaN for a step without recorded all-reduce time."""
        rec = self.seconds > 0
        nbytes = np.where(rec, self.nbytes, 0.0).sum(axis=1)
        secs = np.where(rec, self.seconds, 0.0).sum(axis=1)
        alg = algbw_gbps(nbytes, secs)
        return {"algbw": alg, "busbw": alg * self.factor if self.busbw is not None else None}

    def median_busbw(self):
        """Median over the timed steps of the byte-weighted step busbw (GB/s, float), or None for
        one rank or when no timed step recorded an all-reduce time."""
        s = self.per_step()["busbw"]
        if s is None:
            return None
        v = s[self.timed]
        v = v[np.isfinite(v)]
        return float(np.median(v)) if v.size else None

    def median_algbw(self):
        """Median over the timed steps of the byte-weighted step algbw (GB/s, float) or None."""
        v = self.per_step()["algbw"][self.timed]
        v = v[np.isfinite(v)]
        return float(np.median(v)) if v.size else None


def per_rank_busbw(run, collective=None):
    """Each rank's own busbw per step and bucket, float64 [ranks, steps, buckets] GB/s: that rank's
    buckets/bytes_sent / its buckets/allreduce_time / 1e9 x factor(n) (`collective`: default
    gradient_collective(run)); 0 where the time is 0 and for one rank - what vitddp stores as
    buckets/busbw (docs/schema.md). ResultsError without bytes_sent or allreduce_time."""
    for name in ("buckets/bytes_sent", "buckets/allreduce_time"):
        if not run.has(name):
            raise ResultsError("%s: missing dataset '%s' (no per-rank bandwidth)" % (run.path, name))
    nbytes = np.asarray(run.bucket_series("buckets/bytes_sent"), dtype=float)
    secs = np.asarray(run.bucket_series("buckets/allreduce_time"), dtype=float)
    if run.world_size < 2:
        return np.zeros_like(secs)
    alg = algbw_gbps(nbytes, secs)
    return np.where(secs > 0, alg * bus_factor(run.world_size, collective or gradient_collective(run)), 0.0)


def _nanmedian_cols(a):
    """Column medians of a 2-D array ignoring NaN; NaN for an all-NaN column (no warning)."""
    out = np.full(a.shape[1], np.nan)
    for j in range(a.shape[1]):
        col = a[:, j][np.isfinite(a[:, j])]
        if col.size:
            out[j] = np.median(col)
    return out


def link_probe(run):
    """The file's link probe curve, if it has one: group `link_probe` with `bytes` (int64 [n],
    message sizes) and the all-reduce's `allreduce/busbw` (float64 [n], GB/s; what vitddp-probe
    writes, docs/benchmarks.md) or `busbw`, else `allreduce/time` or `time` (float64 [n], s,
    converted with the all-reduce factor of the file's world_size). Returns (bytes float64 [n],
    busbw GB/s float64 [n]) or None when the file has no such group."""
    if not run.has("link_probe/bytes"):
        return None
    nbytes = np.asarray(run.data("link_probe/bytes"), dtype=float).reshape(-1)
    for prefix in ("link_probe/allreduce/", "link_probe/"):
        if run.has(prefix + "busbw"):
            bw = np.asarray(run.data(prefix + "busbw"), dtype=float).reshape(-1)
            break
        if run.has(prefix + "time"):
            bw = algbw_gbps(nbytes, np.asarray(run.data(prefix + "time"), dtype=float).reshape(-1)) \
                * bus_factor(run.world_size)
            break
    else:
        raise ResultsError("%s: group link_probe has neither 'busbw' nor 'time'" % run.path)
    if bw.shape != nbytes.shape:
        raise ResultsError("%s: link_probe/bytes and its bandwidth differ in length" % run.path)
    return nbytes, bw


def read_probe(path):
    """The all-reduce curve of a vitddp-probe file (or any file with a link_probe group) at `path`:
    (bytes float64 [n], busbw GB/s float64 [n]), sorted by bytes. ResultsError when the file cannot
    be opened or has no link_probe group."""
    from .reader import Run
    with Run(path) as r:
        probe = link_probe(r)
    if probe is None:
        raise ResultsError("%s: no link_probe group (write one with vitddp-probe --out)" % path)
    order = np.argsort(probe[0])
    return probe[0][order], probe[1][order]


def busbw_at(probe, nbytes):
    """The probe's busbw (GB/s) at message size `nbytes`, interpolated linearly in log2(bytes)
    between the two nearest probed sizes (numpy.interp); NaN outside the probed range or for
    nbytes <= 0. `probe` is read_probe's (bytes, busbw)."""
    x, y = probe
    if not nbytes > 0 or x.size == 0 or nbytes < x[0] or nbytes > x[-1]:
        return float("nan")
    return float(np.interp(np.log2(nbytes), np.log2(x), y))


def median_bucket_bytes(run):
    """Median over the buckets of the bytes on the wire of their all-reduce (BucketBandwidth's
    per-bucket median over the timed steps): the message size a run's all-reduces typically have."""
    return float(np.nanmedian(BucketBandwidth(run).per_bucket()["nbytes"]))
