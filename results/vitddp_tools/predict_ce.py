"""The copy-engine all-reduce in `vitddp-report predict`: buckets on several comm streams that share
the copy engines, and the measured runs turned into what one bucket costs alone.

The mechanism (vitddp --allreduce copy-engine: mpi/transports/copy_engine_allreduce_gpu.h,
cuda/kernels/ce_reduce.cu): per bucket, on its comm stream, the peers' chunks go out by
peer-to-peer cudaMemcpyAsync (the GPUs' copy engines over NVLink, no SM), a flag wait, the sum
kernel over this rank's chunk (SMs, beside backward's kernels), the summed chunk copied back to
every peer, a flag wait; with --compression fp16/bf16 the peers' chunks are cast before and after
(buckets/compress_time; the own chunk's casts run inside the sum). Bucket j runs on comm stream
j mod N (--comm-streams N), each stream in order, so bucket j starts at max(ready_j, end of bucket
j - N) and up to N buckets are in flight at once.

The model: processor sharing. A bucket alone takes W (its link-table time: cast + all-reduce, as
one NCCL bucket does); with k >= 2 buckets in flight each progresses at G / k of its alone rate,
G the link table's `concurrency` row (1 when absent): the copies of the buckets in flight share one
copy-engine path (p2p_copy_bench: several streams move no more than one, results/h200x2/copy-engine/
p2p-copy), and G > 1 is what one bucket's flag waits and sum leave to the other's copies. With one
stream this is the single-stream schedule of predict_core exactly.

A measured bucket of a multi-stream run is turned into its alone-equivalent time by the same rule:
over its [allreduce_start, allreduce_end], time with k = 1 in flight counts once, time with k >= 2
counts G / k (`alone + G x shared`, overlap_split); its allreduce_time and compress_time are scaled
by (alone + G shared) / (end - start). G is fitted per link table from runs that measured buckets of
the same payload on one stream and on several (fit_gain); a size whose least-squares G is not
positive (its buckets took longer on several streams than on one even while alone) gives no row
(gain_rows).
"""
import re
from dataclasses import dataclass

import numpy as np

from .predict_link import GAIN, Row
from .reader import ResultsError

CE_TRANSPORT = "copy-engine"
GROUP_RATIO = 1.3  # bucket payloads within this ratio are compared as one size (predict_link.curve_rows)


def comm_streams_of(run):
    """Comm streams the buckets of `run` alternated over (int >= 1): 1 for NCCL, MPI and no DDP; for
    --allreduce copy-engine the count in nccl_transport ('copy-engine (..., 2 comm streams; ...)');
    else the file's own integer option.comm-streams (builds that had --comm-streams before
    nccl_transport named the count); else `run.stated_comm_streams` when set (an int: the count a
    --comm-streams-table row states for a file of a build before --comm-streams, predict.validate).
    ResultsError naming the file when none of these gives it."""
    if run.allreduce != CE_TRANSPORT or run.world_size < 2 or not run.ddp:
        return 1
    for t in run.transports():
        m = re.search(r"(\d+) comm streams?\b", t)
        if m:
            return int(m.group(1))
    if run.option("comm-streams", "auto").isdigit():
        return int(run.option("comm-streams"))
    if getattr(run, "stated_comm_streams", None) is not None:
        return run.stated_comm_streams
    raise ResultsError("%s: --allreduce copy-engine without a comm-stream count in nccl_transport (a build "
                       "before --comm-streams): the streams its buckets used are unknown" % run.path)


def _segments(start, end):
    """Flight segments of rows of bucket intervals. start, end: float [rows, B] (same units).
    Returns (lo, dt, k, inside): lo, dt float [rows, 2B - 1] (segment start and length between the
    sorted interval ends), k int [rows, 2B - 1] (buckets in flight in the segment), inside bool
    [rows, 2B - 1, B] (the segment lies within bucket j's interval)."""
    t = np.sort(np.concatenate([start, end], axis=1), axis=1)
    lo, hi = t[:, :-1], t[:, 1:]
    mid = 0.5 * (lo + hi)
    inside = (start[:, None, :] <= mid[:, :, None]) & (end[:, None, :] >= mid[:, :, None])
    return lo, hi - lo, inside.sum(axis=2), inside


def overlap_split(start, end, horizon=None):
    """Per bucket: (alone, shared), float arrays of start's shape [..., B]: the seconds of its interval
    with no other bucket in flight, and the sum over its segments with k >= 2 in flight of dt / k.
    Its alone-equivalent time under gain G is alone + G x shared (module doc); for intervals that
    never overlap, alone = end - start and shared = 0. `horizon` (broadcastable to start.shape[:-1],
    e.g. each step's backward): only the part of each interval inside [0, horizon] counts."""
    shape = np.shape(start)
    s = np.asarray(start, dtype=float).reshape(-1, shape[-1])
    e = np.asarray(end, dtype=float).reshape(-1, shape[-1])
    lo, dt, k, inside = _segments(s, e)
    if horizon is not None:
        h = np.broadcast_to(np.asarray(horizon, dtype=float), shape[:-1]).reshape(-1, 1)
        dt = np.clip(np.minimum(lo + dt, h) - np.maximum(lo, 0.0), 0.0, None)
    one = (dt * (k == 1))[:, :, None] * inside
    many = (dt * (k >= 2) / np.maximum(k, 1))[:, :, None] * inside
    return one.sum(axis=1).reshape(shape), many.sum(axis=1).reshape(shape)


def shared_schedule(ready, work, streams, gain=1.0):
    """The copy-engine schedule (module doc): bucket j on stream j mod `streams`, started at
    max(ready[j], end of bucket j - streams); while k >= 2 buckets are in flight, bucket j progresses
    at gain[j] / k of its alone rate. ready, work: float [n] seconds (work: each bucket alone, >= 0);
    streams >= 1; gain: float > 0 or float [n] (per bucket: the link table's value at its payload).
    Returns (start, end) float64 [n]."""
    ready, work = np.asarray(ready, dtype=float), np.asarray(work, dtype=float)
    n = ready.size
    gain = np.broadcast_to(np.asarray(gain, dtype=float), (n,))
    start, end = np.full(n, np.nan), np.full(n, np.nan)
    rem = work.copy()
    nxt = list(range(streams))          # the next bucket of each stream
    free = [-np.inf] * streams          # when each stream's last bucket ended
    active = {}                         # stream -> bucket in flight
    t, done = -np.inf, 0
    while done < n:
        rate = {j: 1.0 if len(active) == 1 else gain[j] / len(active) for j in active.values()}
        t_end, first = min(((t + rem[j] / r, j) for j, r in rate.items()), default=(np.inf, None))
        cands = [(max(ready[nxt[s]], free[s]), s) for s in range(streams) if s not in active and nxt[s] < n]
        t_start, s = min(cands, default=(np.inf, None))
        step_to = t_end if t_end <= t_start else t_start
        for j, r in rate.items():
            rem[j] -= (step_to - t) * r
        t = step_to
        if first is not None and t_end <= t_start:
            for s_, j in list(active.items()):
                if j == first or rem[j] <= 1e-15:
                    rem[j], end[j], free[s_] = 0.0, t, t
                    del active[s_]
                    done += 1
            continue
        j = nxt[s]
        start[j], nxt[s] = t, nxt[s] + streams
        if rem[j] <= 0.0:
            end[j], free[s], done = t, t, done + 1
        else:
            active[s] = j
    return start, end


def work_inside(start, end, horizon, gain=1.0, weight=1.0):
    """Comm work done inside [0, horizon] by a schedule (start, end: float [n] seconds), in seconds of
    one bucket alone: per bucket, its time alone + gain x its shared time there (overlap_split),
    times weight, summed (float). gain, weight: float or float [n]."""
    if not len(start):
        return 0.0
    alone, shared = overlap_split(np.asarray(start)[None], np.asarray(end)[None], horizon)
    return float(((alone[0] + np.asarray(gain, dtype=float) * shared[0]) * weight).sum())


@dataclass
class RunShares:
    """One multi-rank run's bucket intervals split for the alone-equivalent times (module doc), over
    its timed steps, float [ranks, timed steps, buckets] seconds: dur (end - start), alone and shared
    (overlap_split), allreduce / compress (buckets/allreduce_time, buckets/compress_time); streams
    (comm streams), compression, sent (float [buckets], rank 0's median buckets/bytes_sent), options
    ({name: str}, the run's options) and label."""
    streams: int
    compression: str
    sent: np.ndarray
    dur: np.ndarray
    alone: np.ndarray
    shared: np.ndarray
    allreduce: np.ndarray
    compress: np.ndarray
    options: dict
    label: str = ""

    @classmethod
    def from_run(cls, run):
        """From a reader.Run with per-bucket times (comm_streams_of's ResultsError propagates)."""
        t = run.timed()
        g = lambda n: np.asarray(run.bucket_series(n), dtype=float)[:, t]
        start, end = g("buckets/allreduce_start"), g("buckets/allreduce_end")
        alone, shared = overlap_split(start, end)
        comp = g("buckets/compress_time") if run.has("buckets/compress_time") else np.zeros_like(start)
        sent = np.median(g("buckets/bytes_sent")[0], axis=0)
        return cls(comm_streams_of(run), run.compression, sent, end - start, alone, shared,
                   g("buckets/allreduce_time"), comp, run.options(), getattr(run, "label", run.path))

    def scaled(self, series, gain):
        """`series` ('allreduce' or 'compress') as if each bucket had run alone: times
        (alone + gain x shared) / dur, float [ranks, timed steps, buckets]; unchanged for one
        stream. gain: float or float [buckets]."""
        v = getattr(self, series)
        if self.streams == 1:
            return v
        with np.errstate(invalid="ignore", divide="ignore"):
            q = np.where(self.dur > 0, (self.alone + np.asarray(gain, dtype=float) * self.shared) / self.dur, 1.0)
        return v * q


def _size_groups(sent):
    """Indices of `sent` (bytes [B]) grouped by size, sizes within GROUP_RATIO of the group's
    smallest: list of (lo bytes, hi bytes, index array)."""
    order = np.argsort(sent)
    out, cur = [], [order[0]]
    for i in order[1:]:
        if sent[i] > sent[cur[0]] * GROUP_RATIO:
            out.append(cur)
            cur = []
        cur.append(i)
    out.append(cur)
    return [(float(sent[g].min()), float(sent[g].max()), np.asarray(g)) for g in out]


def fit_gain(shares, comparable=lambda a, b: True, min_shared=0.1, min_points=3):
    """The concurrency gain G per payload size from a list of RunShares (one link table's runs).
    Pairs: every run on several streams with every single-stream run of the same compression that
    `comparable(options_a, options_b)` accepts (the caller's rule: they differ only in what the model
    covers). Per payload size group of the multi-stream run (sizes within GROUP_RATIO) that the
    single-stream run also measured, each bucket i of the group gives alone_i + G shared_i = one
    (medians over ranks and timed steps; one: the single-stream run's median interval of that size),
    and G is their least-squares solution, pooled over all pairs: G = sum shared_i (one - alone_i) /
    sum shared_i^2 over the buckets of the group's sizes (size groups again within GROUP_RATIO).
    A size group whose shared time is below `min_shared` of its buckets' intervals measured no
    concurrency and gives none; a size measured by fewer than `min_points` buckets gives none (one
    bucket's noise, e.g. the first bucket's, is no gain). Returns a list of (bytes float, G float,
    buckets int) sorted by bytes, G the least-squares value as it is: one <= 0 says the buckets of
    that size took longer on several streams than on one even while alone, which no sharing of the
    copy engines explains (gain_rows keeps G > 0 only); empty when no pair gives one."""
    med = lambda a: np.median(a.reshape(-1, a.shape[-1]), axis=0)
    pts = []  # (payload, shared, one - alone)
    singles = [s for s in shares if s.streams == 1]
    for m in (s for s in shares if s.streams > 1):
        alone, shared, dur = med(m.alone), med(m.shared), med(m.dur)
        for lo, hi, idx in _size_groups(m.sent):
            if shared[idx].sum() < min_shared * dur[idx].sum():
                continue
            for s in singles:
                near = (s.sent >= lo / GROUP_RATIO) & (s.sent <= hi * GROUP_RATIO)
                if s.compression == m.compression and near.any() and comparable(m.options, s.options):
                    one = float(np.median(med(s.dur)[near]))
                    pts += [(m.sent[i], shared[i], one - alone[i]) for i in idx]
    if not pts:
        return []
    pts = np.array(pts, dtype=float)
    out = []
    for _, _, idx in _size_groups(pts[:, 0]):
        if len(idx) < min_points:
            continue
        b, y = pts[idx, 1], pts[idx, 2]
        out.append((float(np.median(pts[idx, 0])), float((b * y).sum() / (b * b).sum()), len(idx)))
    return out


def gain_rows(fits, name):
    """The `concurrency` rows of fit_gain's list `fits` whose G is positive (predict_link.Row, table
    `name`), and a note (str) per size whose least-squares G is not. Under processor sharing a
    bucket's time alone on several streams is part of its work (alone + G x shared = its time on one
    stream), so buckets whose time alone already exceeds their time on one stream measured something
    other than the sharing of the copy engines: their size gives no row, and G there is interpolated
    or held from the other sizes' rows (predict_link)."""
    rows = [Row(CE_TRANSPORT, GAIN, b, 0.0, g, name) for b, g, _ in fits if g > 0]
    notes = ["%s: no concurrency row at %.0f bytes: the least-squares G of its %d buckets is %.2f (they took "
             "longer on several comm streams than on one even while alone, which sharing the copy engines does not "
             "explain); G there from the other sizes' rows" % (name, b, n, g) for b, g, n in fits if g <= 0]
    return rows, notes
