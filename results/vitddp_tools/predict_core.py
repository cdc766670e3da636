"""The what-if model of `vitddp-report predict`: one reference run's phases and gradient-ready
times, a scenario (ranks, transport, buckets, compression, DDP or ZeRO-1), and the comm-stream
schedule that gives the step time.

The model is vitddp's reducer (README.md, docs/findings.md): buckets in gradient-ready order on one
comm stream, launched strictly in bucket order, each once its last gradient is ready. Bucket j's
work starts at max(ready_j, end_{j-1}) and lasts its compression work plus its collective calls
(predict_link: alpha + bytes x factor / busbw). Exposed communication = max(0, last end - backward).
The copy-engine all-reduce (transport 'copy-engine', vitddp --allreduce copy-engine) alternates the
buckets over N comm streams whose buckets in flight share the copy engines: predict_ce's schedule,
which for N = 1 is this one.
Step = input wait + forward + backward + exposed + optimizer (+ ZeRO-1's parameter all-gather where the
next forward does not hide it) + the
reference's host time per step outside the device step (1 / steps_per_second - median step time).

Gradient-ready times come from the reference run. Recorded ones first (vitddp --record-grad-ready,
grad_ready/*): per gradient-ready group, (the flat-buffer bytes complete once it is reported,
ready_time - backward start), the slowest rank per step, median over the timed steps. Otherwise
inferred from the buckets: a bucket whose comm work started after the previous bucket's ended (the
stream was idle) started when its last gradient was ready, so (cumulative bucket bytes, start -
backward start) is a point of the ready curve. Between points, and where the stream was never idle,
the curve is linear in the cumulative gradient bytes, from (0, 0) to (all bytes, end of backward).
The curve is kept as a fraction of backward; the last bucket is ready at the end of backward.

Backward's slowdown under concurrent traffic: with a 1-GPU baseline, backward = baseline backward +
k x (comm-stream busy time inside backward), k = (reference backward - baseline backward) /
(reference busy time inside backward), solved as a fixed point with the schedule; without one, the
reference's backward as it is (factor 1.0). On several comm streams the busy time is the comm work
done inside backward in seconds of one bucket alone (predict_ce.work_inside: overlapping buckets
count once, times their concurrency gain), so that the same bucket costs backward the same on one
stream and on several. The copy-engine all-reduce's fp16/bf16 casts have a coefficient of their own,
s per second of cast work inside backward (the rest of a bucket's work keeps k): k prices copies
that hold no SM and the sums, a cast kernel holds SMs for all of its time. s is measured from runs
with that compression and the same options otherwise (fit_cast_cost: their backward less the
baseline and k x their other comm work, least squares over their cast work inside backward); over
NCCL, whose kernels hold SMs as the casts do, and without such runs the casts count at k.
"""
from dataclasses import dataclass, field

import numpy as np

from .predict_ce import CE_TRANSPORT, comm_streams_of, overlap_split, shared_schedule, work_inside
from .predict_model import MIB, VIT_CONFIGS, assign_buckets, powersgd_bucket, vit_parameters, wire_bytes
from .reader import ResultsError

CASTS = ("fp16", "bf16")  # compressions whose own work is casting the bucket (the link table's `cast` rows)
IDLE_GAP_S = 10e-6  # a bucket starting later than this after the previous one's end found the stream idle
# (back-to-back buckets start 2-4 us apart on H200: results/h200x2/interconnects/net)


def _med(a):
    """Median of an array as float."""
    return float(np.median(np.asarray(a, dtype=float)))


def transport_of(run):
    """'nvlink', 'shm', 'net' (from nccl_transport's first word: P2P, SHM, NET), 'copy-engine',
    or 'none' for one rank / no DDP."""
    tr = run.transports()
    first = (tr[0].split() or ["none"])[0].lower() if tr else "none"
    return {"p2p": "nvlink", "shm": "shm", "net": "net", "copy-engine": "copy-engine"}.get(first, first)


@dataclass
class Reference:
    """What a prediction takes from one results file (times in seconds, medians over the timed
    steps of the slowest rank): forward (input wait + forward), backward, optimizer, host_gap,
    ready_bytes / ready_frac (float64 [k] points of the gradient-ready curve: cumulative fp32 bytes
    in gradient-ready order -> fraction of backward), ready_source ('recorded': grad_ready/*, with
    ready_groups groups; 'inferred': from idle comm-stream starts), busy_in_backward (comm-stream
    time inside backward; on several comm streams see work_in_backward), and the configuration
    (model, ranks, batch, precision, transport, cap, compression, comm_streams). sent: float [buckets],
    rank 0's median buckets/bytes_sent; inside_backward: float [ranks, timed steps, buckets] seconds
    of each bucket's interval inside backward; alone_in_backward / shared_in_backward: the same
    split into time alone and shared (predict_ce.overlap_split), filled on several comm streams only;
    cast_frac: float [buckets], the share of each bucket's comm work that is its fp16/bf16 casts
    (median buckets/compress_time over median compress_time + allreduce_time; 0 without them)."""
    path: str
    model: str
    num_classes: int
    ranks: int
    batch: int
    precision: str
    transport: str
    cap_mb: float
    first_mb: float
    compression: str
    overlap: bool
    forward: float
    backward: float
    optimizer: float
    host_gap: float
    steps_per_second: float
    ready_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0))
    ready_frac: np.ndarray = field(default_factory=lambda: np.zeros(0))
    ready_source: str = "inferred"
    ready_groups: int = 0
    idle_buckets: int = 0
    num_buckets: int = 0
    busy_in_backward: float = 0.0
    options: dict = field(default_factory=dict)
    comm_streams: int = 1
    sent: np.ndarray = field(default_factory=lambda: np.zeros(0))
    inside_backward: np.ndarray = field(default_factory=lambda: np.zeros((0, 0, 0)))
    alone_in_backward: np.ndarray = field(default_factory=lambda: np.zeros((0, 0, 0)))
    shared_in_backward: np.ndarray = field(default_factory=lambda: np.zeros((0, 0, 0)))
    cast_frac: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @classmethod
    def from_run(cls, run):
        """Reads `run` (reader.Run); ResultsError naming the file when it cannot serve (no DDP
        buckets with times, gradient accumulation, an unknown model)."""
        if run.model not in VIT_CONFIGS:
            raise ResultsError("%s: model '%s' has no parameter table here (one of %s)" % (
                run.path, run.model, ", ".join(VIT_CONFIGS)))
        if str(run.option("shard-optimizer", "false")).lower() in ("true", "1", "on"):
            raise ResultsError("%s: a ZeRO-1 run (--shard-optimizer): its optimizer time is already 1/N and its "
                               "forward holds the all-gather waits; predict from a DDP or --no-ddp run" % run.path)
        if run.grad_accum_steps != 1:
            raise ResultsError("%s: --grad-accum-steps %d: the predictor models one micro-step per step" % (
                run.path, run.grad_accum_steps))
        t = run.timed()
        g = lambda n: np.asarray(run.step_series(n), dtype=float)[:, t]
        fwd = g("timing/input_wait") + g("timing/forward")
        bwd = g("timing/backward")
        step = g("timing/step_time").max(axis=0)
        sps = run.summary("steps_per_second")
        ncls = int(run.option("num-classes", "0") or 0)
        ref = cls(path=run.path, model=run.model, num_classes=ncls, ranks=run.world_size, batch=run.batch_size,
                  precision=run.precision, transport=transport_of(run), cap_mb=run.bucket_cap_mb,
                  first_mb=float(run.option("first-bucket-mb", "1")), compression=run.compression,
                  overlap=run.overlap if run.ddp else True, forward=_med(fwd.max(axis=0)),
                  backward=_med(bwd.max(axis=0)), optimizer=_med(g("timing/optimizer").max(axis=0)),
                  host_gap=max(0.0, 1.0 / sps - _med(step)), steps_per_second=sps, options=run.options(),
                  comm_streams=comm_streams_of(run))
        ref._read_buckets(run, t, fwd, bwd)
        if run.has_grad_ready():
            ref._read_grad_ready(run, t, fwd)
        return ref

    def _read_buckets(self, run, t, fwd, bwd):
        """The ready curve and the busy time inside backward from buckets/allreduce_start/_end. On N
        comm streams a bucket found its stream idle when it started after bucket j - N's end; the
        flight split inside backward (predict_ce.overlap_split) is kept for work_in_backward."""
        total = 4.0 * sum(p.numel + (-p.numel) % 4 for p in vit_parameters(self.model, self.num_classes))
        xs, ys = [0.0], [0.0]
        if run.ddp and run.has("buckets/allreduce_start") and run.has("buckets/bytes"):
            start = np.asarray(run.bucket_series("buckets/allreduce_start"), dtype=float)[:, t] - fwd[:, :, None]
            end = np.asarray(run.bucket_series("buckets/allreduce_end"), dtype=float)[:, t] - fwd[:, :, None]
            cum = np.cumsum(np.asarray(run.data("buckets/bytes"), dtype=float))
            self.num_buckets = cum.size
            if cum.size and end.max() > 0:
                n = self.comm_streams
                prev_end = np.concatenate([np.full(end.shape[:2] + (min(n, cum.size),), -np.inf), end[:, :, :-n]], axis=2)
                idle = start > prev_end + IDLE_GAP_S
                for j in range(cum.size - 1):  # the last bucket's ready time is the end of backward
                    if idle[:, :, j].any() and self.overlap:
                        xs.append(cum[j])
                        ys.append(_med(start[:, :, j][idle[:, :, j]]) / self.backward)
                        self.idle_buckets += 1
                b = bwd[:, :, None]
                self.inside_backward = np.clip(np.minimum(end, b) - np.maximum(start, 0.0), 0.0, None)
                self.busy_in_backward = _med(self.inside_backward.sum(axis=2).max(axis=0))
                self.sent = np.median(np.asarray(run.bucket_series("buckets/bytes_sent"), dtype=float)[0][t], axis=0)
                self.cast_frac = self._cast_fraction(run, t)
                if n > 1:
                    self.alone_in_backward, self.shared_in_backward = overlap_split(start, end, bwd)
        xs.append(total)
        ys.append(1.0)
        ys = np.clip(np.maximum.accumulate(np.asarray(ys)), 0.0, 1.0)
        self.ready_bytes, self.ready_frac = np.asarray(xs), ys

    def _cast_fraction(self, run, t):
        """cast_frac (float [buckets]) from buckets/compress_time and allreduce_time over the timed
        steps `t`; zeros unless the run cast its buckets to fp16/bf16."""
        if self.compression not in CASTS or not run.has("buckets/compress_time"):
            return np.zeros(self.num_buckets)
        med = lambda n: np.median(np.asarray(run.bucket_series(n), dtype=float)[:, t].reshape(-1, self.num_buckets), axis=0)
        cast, comm = med("buckets/compress_time"), med("buckets/allreduce_time")
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(cast + comm > 0, cast / (cast + comm), 0.0)

    def _read_grad_ready(self, run, t, fwd):
        """The ready curve from the recorded times (grad_ready/ready_time, --record-grad-ready): per
        group, ready_time - (input_wait + forward) (backward starts where forward ends), the slowest
        rank per step, median over the timed steps, over the reference's backward, against the
        flat-buffer bytes complete by then (grad_ready/prefix_bytes). Replaces the inferred curve."""
        g = run.grad_ready()
        into = g.ready_time[:, t] - fwd[:, :, None]               # [ranks, timed steps, groups]
        med = np.median(into.max(axis=0), axis=0)                  # [groups]
        total = 4.0 * sum(p.numel + (-p.numel) % 4 for p in vit_parameters(self.model, self.num_classes))
        if int(g.prefix_bytes[-1]) != int(total):
            raise ResultsError("%s: grad_ready/prefix_bytes ends at %d bytes, %s's gradients are %d bytes" % (
                run.path, int(g.prefix_bytes[-1]), self.model, int(total)))
        ys = np.clip(np.maximum.accumulate(np.concatenate([[0.0], med / self.backward])), 0.0, 1.0)
        self.ready_bytes = np.concatenate([[0.0], g.prefix_bytes.astype(float)])
        self.ready_frac = ys
        self.ready_source, self.ready_groups = "recorded", g.groups

    def work_in_backward(self, gain, weight=1.0):
        """Comm work inside the reference's backward in seconds of one bucket alone (float): per
        rank and step the sum over buckets of weight x (alone + gain x shared) inside backward (one
        comm stream: weight x the bucket's time inside backward), the slowest rank, median over the
        timed steps; with weight 1 on one stream, busy_in_backward. gain: float or float [buckets]
        (the link table's concurrency gain at each bucket's payload); weight: float or float
        [buckets] (e.g. cast_frac: the casts' part of it)."""
        per = self.inside_backward
        if self.comm_streams > 1 and self.alone_in_backward.size:
            per = self.alone_in_backward + np.asarray(gain, dtype=float) * self.shared_in_backward
        if not per.size:
            return self.busy_in_backward
        return _med((per * np.asarray(weight, dtype=float)).sum(axis=2).max(axis=0))

    def ready_fraction(self, cum_bytes):
        """Fraction of backward at which the gradients up to `cum_bytes` (fp32 bytes in ready order)
        are ready: the ready curve interpolated linearly."""
        return np.interp(cum_bytes, self.ready_bytes, self.ready_frac)


@dataclass
class Scenario:
    """What to predict: ranks (>= 1), transport (a link-table name), cap_mb / first_mb (MiB),
    compression (none, fp16, bf16, powersgd), mode ('ddp' all-reduce or 'zero1' reduce-scatter +
    parameter all-gather), overlap (buckets during backward), powersgd_rank / powersgd_rate,
    precision (the reference's), allgather_dtype (ZeRO-1's parameter all-gather, as vitddp's
    --allgather-dtype: 'auto' = bf16 under --precision bf16 on more than one rank, else fp32),
    comm_streams (the comm streams the buckets alternate over: 1, or 1-4 for transport
    'copy-engine', as vitddp's --comm-streams)."""
    ranks: int
    transport: str
    cap_mb: float
    first_mb: float = 1.0
    compression: str = "none"
    mode: str = "ddp"
    overlap: bool = True
    powersgd_rank: int = 1
    powersgd_rate: float = 2.0
    precision: str = "fp32"
    allgather_dtype: str = "auto"
    comm_streams: int = 1

    def gathered_dtype(self):
        """The dtype ZeRO-1's all-gather moves: 'fp32' or 'bf16' (allgather_dtype resolved)."""
        if self.allgather_dtype != "auto":
            return self.allgather_dtype
        return "bf16" if self.precision == "bf16" and self.ranks > 1 else "fp32"

    def describe(self):
        """One line: ranks, transport (and comm streams), buckets, compression, mode."""
        streams = "" if self.transport != CE_TRANSPORT else " on %d comm stream%s" % (
            self.comm_streams, "" if self.comm_streams == 1 else "s")
        return "%d rank%s, %s%s, %g MiB buckets (first %g MiB), compression %s, %s%s" % (
            self.ranks, "" if self.ranks == 1 else "s", self.transport, streams, self.cap_mb, self.first_mb, self.compression,
            "DDP all-reduce" if self.mode == "ddp" else "ZeRO-1 (%s all-gather)" % self.gathered_dtype(),
            "" if self.overlap else ", no overlap")


@dataclass
class Baseline:
    """A 1-GPU run without DDP: its backward (s, median over the timed steps) and path."""
    path: str
    backward: float

    @classmethod
    def from_run(cls, run, ref=None):
        """ResultsError unless `run` has one rank and, given Reference `ref`, the same model, batch
        and precision (its backward is the reference's without traffic)."""
        if run.world_size != 1:
            raise ResultsError("--baseline %s: %d ranks (a 1-GPU run is needed)" % (run.path, run.world_size))
        if ref is not None:
            mine, theirs = (run.model, run.batch_size, run.precision), (ref.model, ref.batch, ref.precision)
            if mine != theirs:
                raise ResultsError("--baseline %s: %s, batch %d, %s; the reference is %s, batch %d, %s (the "
                                   "baseline must run the reference's model, batch and precision)" % (
                                       (run.path,) + mine + theirs))
        t = run.timed()
        return cls(run.path, _med(np.asarray(run.step_series("timing/backward"), dtype=float)[0, t]))


def bucket_work(bucket, sc, table):
    """Seconds of one bucket's comm-stream work in scenario `sc`: (compression work, collective
    calls). fp16/bf16: one call of numel x 2 bytes (+ the table's `cast` work when it has one);
    powersgd: the uncompressed all-reduce, P and Q (predict_model.powersgd_bucket) + `powersgd` work;
    ZeRO-1: a reduce-scatter of the (compressed) gradient instead of the all-reduce."""
    coll = "allreduce" if sc.mode == "ddp" else "reducescatter"
    work = 0.0
    if sc.compression == "powersgd":
        d = powersgd_bucket(bucket, sc.powersgd_rank, sc.powersgd_rate)
        calls = [4 * n for n in (d["uncompressed"], d["p"], d["q"]) if n]
        kind = "powersgd"
    elif sc.compression in ("fp16", "bf16"):
        calls, kind = [bucket.nbytes // 2], "cast"
    elif sc.compression == "none":
        calls, kind = [bucket.nbytes], None
    else:
        raise ResultsError("unknown compression '%s' (none, fp16, bf16 or powersgd)" % sc.compression)
    if kind and table.has(sc.transport, kind):
        work = table.time(sc.transport, kind, bucket.nbytes, sc.ranks)
    comm = sum(table.time(sc.transport, coll, b, sc.ranks) for b in calls)
    return work, comm


def schedule(ready, durations):
    """The comm stream: bucket j starts at max(ready[j], end[j-1]) and ends durations[j] later.
    ready, durations: float [k] seconds. Returns (start, end) float64 [k]."""
    start, end = np.zeros(len(ready)), np.zeros(len(ready))
    t = -np.inf
    for j, (r, d) in enumerate(zip(ready, durations)):
        start[j] = max(r, t)
        end[j] = t = start[j] + d
    return start, end


def busy_inside(start, end, backward, weight=1.0):
    """Seconds of [start_j, end_j] intervals inside [0, backward], each times weight_j (float or
    float [k]), summed (float)."""
    return float((np.clip(np.minimum(end, backward) - np.maximum(start, 0.0), 0.0, None) * weight).sum())


@dataclass
class CastCost:
    """Backward's slowdown per second of fp16/bf16 cast work inside it (per_second, >= 0), measured
    by fit_cast_cost from the compressed runs named in `runs` (list of str) beside the reference's k
    (its slowdown per second of the rest of the comm work)."""
    per_second: float
    runs: list
    k: float

    def describe(self):
        """One line: s, k and the runs s comes from."""
        return "s = %.3f per second of cast work inside backward (k = %.3f for the rest of the comm work), from %s" % (
            self.per_second, self.k, ", ".join(self.runs))


def gains_at(table, transport, sent):
    """The link table's concurrency gain at each payload of `sent` (bytes [buckets]): float [buckets]."""
    return np.array([table.gain(transport, x) for x in sent])


def slowdown(ref, baseline, table):
    """(k, busy): backward's slowdown per second of comm work inside it, k = (reference backward -
    baseline backward) / busy, busy the reference's comm work inside its backward (s of one bucket
    alone: Reference.work_in_backward at the table's gains); k = 0 without comm work; may be < 0."""
    busy = ref.work_in_backward(gains_at(table, ref.transport, ref.sent))
    return ((ref.backward - baseline.backward) / busy if busy > 0 else 0.0), busy


def fit_cast_cost(ref, baseline, casts, table):
    """The CastCost of fp16/bf16 casts beside backward, from `casts` (list of (label, Reference):
    runs with that compression, on the reference's transport, precision and model and otherwise
    differing from it only in what the model covers). For the copy-engine all-reduce only: there k
    (slowdown()) prices the copies, which hold no SM, and the sums, while a cast kernel holds SMs for
    all of its time, so its second costs backward more; NCCL's comm work is itself kernels that hold
    SMs throughout (k then holds for the casts as well). Each run i: backward_i - baseline = k x A_i
    + s x C_i, C_i its casts' work inside its backward and A_i the rest (Reference.work_in_backward
    weighted by cast_frac and 1 - cast_frac, at the table's gains); s = sum C_i (backward_i -
    baseline - k A_i) / sum C_i^2 (least squares), floored at 0. None for another transport, without
    a baseline, when the reference cast its own buckets (its k then holds for the casts) or without a
    run that cast inside backward."""
    if ref.transport != CE_TRANSPORT or baseline is None or ref.compression in CASTS:
        return None
    k = max(slowdown(ref, baseline, table)[0], 0.0)
    pts = []
    for label, c in casts:
        g = gains_at(table, c.transport, c.sent)
        cast = c.work_in_backward(g, c.cast_frac)
        if cast > 0:
            pts.append((label, cast, c.backward - baseline.backward - k * c.work_in_backward(g, 1.0 - c.cast_frac)))
    if not pts:
        return None
    x, y = np.array([p[1] for p in pts]), np.array([p[2] for p in pts])
    return CastCost(max(float((x * y).sum() / (x * x).sum()), 0.0), [p[0] for p in pts], k)


@dataclass
class Prediction:
    """A prediction (seconds unless said): forward, backward, exposed, optimizer, allgather (ZeRO-1:
    the part of the parameter all-gathers the next forward does not hide; allgather_total: all of them),
    host_gap, step, steps_per_second (per GPU), images_per_second (per GPU), comm_total (comm-stream
    time), dominant ('compute', 'exposed comm' or 'optimizer'), buckets (count), start / end / ready
    (float64 [k], from backward start), assumptions (list of str)."""
    scenario: Scenario
    forward: float
    backward: float
    exposed: float
    optimizer: float
    allgather: float
    host_gap: float
    step: float
    steps_per_second: float
    images_per_second: float
    comm_total: float
    dominant: str
    buckets: int
    start: np.ndarray
    end: np.ndarray
    ready: np.ndarray
    assumptions: list
    allgather_total: float = 0.0


def predict(ref, sc, table, baseline=None, cast=None, iterations=100):
    """The Prediction of scenario `sc` from Reference `ref`, LinkTable `table`, an optional
    Baseline and an optional CastCost (fit_cast_cost; None: the casts cost backward what the
    reference's comm work does); the model: the module doc. ResultsError for an impossible
    scenario."""
    if sc.ranks < 1:
        raise ResultsError("--ranks must be >= 1, got %d" % sc.ranks)
    if sc.compression == "powersgd" and sc.powersgd_rank < 1:
        raise ResultsError("--powersgd-rank must be >= 1, got %d" % sc.powersgd_rank)
    if sc.mode not in ("ddp", "zero1"):
        raise ResultsError("--mode must be ddp or zero1, got '%s'" % sc.mode)
    if sc.mode == "zero1" and sc.compression != "none":
        raise ResultsError("--mode zero1 with --compression %s: vitddp's ZeRO-1 reduce-scatters fp32 only (%s)" % (
            sc.compression, "PowerSGD needs an all-reduce" if sc.compression == "powersgd" else "no 16-bit reduce-scatter"))
    if sc.allgather_dtype not in ("auto", "fp32", "bf16"):
        raise ResultsError("--allgather-dtype must be auto, fp32 or bf16, got '%s'" % sc.allgather_dtype)
    if sc.allgather_dtype == "bf16" and sc.precision != "bf16":
        raise ResultsError("--allgather-dtype bf16: the reference runs in %s; vitddp gathers bf16 only under "
                           "--precision bf16 (its model reads a bf16 copy of the parameters there)" % sc.precision)
    if sc.first_mb > sc.cap_mb:
        raise ResultsError("--first-bucket-mb %g must not exceed --bucket-cap-mb %g (as vitddp refuses it)" % (
            sc.first_mb, sc.cap_mb))
    if not 1 <= sc.comm_streams <= 4:
        raise ResultsError("--comm-streams must be in [1, 4] (vitddp's range), got %d" % sc.comm_streams)
    if sc.comm_streams > 1 and sc.transport != CE_TRANSPORT:
        raise ResultsError("--comm-streams %d with transport %s: vitddp alternates the buckets over several comm "
                           "streams only with --allreduce copy-engine (transport %s)" % (
                               sc.comm_streams, sc.transport, CE_TRANSPORT))
    if sc.transport == CE_TRANSPORT and sc.compression == "powersgd":
        raise ResultsError("--compression powersgd with transport %s: vitddp refuses it (PowerSGD's P and Q "
                           "all-reduces use NCCL)" % CE_TRANSPORT)
    notes = []
    params = vit_parameters(ref.model, ref.num_classes)
    buckets = assign_buckets(params, sc.cap_mb, sc.first_mb)
    cum = 4.0 * np.array([b.end_elem for b in buckets], dtype=float)
    frac = ref.ready_fraction(cum) if sc.overlap else np.ones(len(buckets))
    frac[-1] = 1.0
    work = [bucket_work(b, sc, table) for b in buckets] if sc.ranks > 1 else [(0.0, 0.0)] * len(buckets)
    dur = np.array([w + c for w, c in work])
    streams = sc.comm_streams
    gains = gains_at(table, sc.transport, [wire_bytes(b, sc.compression, sc.powersgd_rank, sc.powersgd_rate)[0]
                                           for b in buckets])
    b0, coef = _backward_terms(ref, sc, table, baseline, cast, work, notes)
    if streams == 1:
        sched, inside = (lambda r: schedule(r, dur)), (lambda st, en, h: busy_inside(st, en, h, coef))
    else:
        sched = lambda r: shared_schedule(r, dur, streams, gains)
        inside = lambda st, en, h: work_inside(st, en, h, gains, coef)
    bwd = b0
    for _ in range(iterations):
        start, end = sched(frac * bwd)
        new = b0 + inside(start, end, bwd)
        if abs(new - bwd) < 1e-9:
            break
        bwd = new
    start, end = sched(frac * bwd)
    exposed = max(0.0, float(end.max()) - bwd) if len(end) and sc.ranks > 1 else 0.0  # several streams: not always the last bucket
    opt = ref.optimizer / (sc.ranks if sc.mode == "zero1" else 1)
    gather = gather_total = 0.0
    if sc.mode == "zero1" and sc.ranks > 1:
        # vitddp gathers the parameters (fp32, or their bf16 copy: --allgather-dtype) from the last
        # bucket to the first, and the next step's forward waits per block for its own buckets; the
        # last bucket gathered (bucket 0) holds the last block and the head, which forward reads last.
        dtype = sc.gathered_dtype()
        elem = 2 if dtype == "bf16" else 4
        times = [table.time(sc.transport, "allgather", b.numel * elem, sc.ranks) for b in buckets]
        gather_total = sum(times)
        # The first bucket gathered (the last one: patch embedding and the first blocks) must be
        # complete before any forward kernel runs; the rest can hide behind forward.
        gather = max(times[-1], gather_total - ref.forward)
        notes.append("ZeRO-1: reduce-scatter per bucket on the comm stream, optimizer on 1/%d of the parameters "
                     "(%.2f ms), then an all-gather of the %s parameters per bucket (%.2f ms in all), overlapped "
                     "with the next step's forward (%.2f ms): exposed = max(first bucket gathered, all-gather - forward) = %.2f ms (the "
                     "GPU backend; the CPU backend waits for them at the step's end)%s" % (
                         sc.ranks, opt * 1e3, dtype, gather_total * 1e3, ref.forward * 1e3, gather * 1e3,
                         "; the bf16 casts around the all-gather are not modelled" if dtype == "bf16" else ""))
    step = ref.forward + bwd + exposed + opt + gather + ref.host_gap
    terms = {"compute": ref.forward + bwd, "exposed comm": exposed + gather, "optimizer": opt}
    notes += _assumptions(ref, sc, table, len(buckets), gains)
    return Prediction(sc, ref.forward, bwd, exposed, opt, gather, ref.host_gap, step, 1.0 / step,
                      ref.batch / step, float(dur.sum()), max(terms, key=terms.get), len(buckets),
                      start, end, frac * bwd, notes, gather_total)


def _backward_terms(ref, sc, table, baseline, cast, work, notes):
    """(b0, coef) of backward = b0 + sum over buckets of coef_j x (bucket j's comm work inside
    backward): b0 the baseline's backward and coef_j = k, or for fp16/bf16 compression k x (1 - f_j)
    + s x f_j, f_j the cast's share of bucket j's work (`work`: bucket_work's (cast, calls) per
    bucket) and s CastCost.per_second (k without one); without a baseline the reference's backward
    and 0. Appends the assumptions to `notes`."""
    if baseline is None:
        notes.append("backward slowdown factor 1.0 (no --baseline): backward = the reference's %.2f ms, whatever "
                     "traffic runs beside it" % (ref.backward * 1e3))
        return ref.backward, np.zeros(len(work))
    k, busy = slowdown(ref, baseline, table)
    if k < 0:
        notes.append("reference backward %.2f ms < baseline %.2f ms: no slowdown (k = 0)" % (
            ref.backward * 1e3, baseline.backward * 1e3))
        k = 0.0
    one = ref.comm_streams == 1 and sc.comm_streams == 1
    what = ("comm-stream work", "comm-stream time") if one else ("comm work (s of one bucket alone)",) * 2
    notes.append("backward slowdown: reference %.2f ms / baseline %.2f ms = %.3f with %.2f ms of %s "
                 "inside it; backward = %.2f ms + %.3f x (%s inside backward)" % (
                     ref.backward * 1e3, baseline.backward * 1e3, ref.backward / baseline.backward,
                     busy * 1e3, what[0], baseline.backward * 1e3, k, what[1]))
    if sc.compression not in CASTS or sc.ranks < 2:
        return baseline.backward, np.full(len(work), k)
    total = np.array([w + c for w, c in work])
    f = np.divide([w for w, _ in work], total, out=np.zeros(len(work)), where=total > 0)
    share = 100 * float((f * total).sum() / max(total.sum(), 1e-30))
    if cast is None:
        why = ("NCCL's kernels, like the casts, hold SMs while they run" if sc.transport != CE_TRANSPORT else
               "the reference's own casts are part of its comm work" if ref.compression in CASTS else
               "no run with that compression measured their own cost (--fit-link runs with it and --baseline)")
        notes.append("the fp16/bf16 casts (%.0f%% of the comm work) slow backward as the reference's comm work does, "
                     "k = %.3f per second of them inside it: %s" % (share, k, why))
        return baseline.backward, np.full(len(work), k)
    notes.append("the fp16/bf16 casts (%.0f%% of the comm work) slow backward by their own coefficient: %s (their "
                 "backward - baseline - k x their other comm work inside it, least squares over their casts' work "
                 "inside it; the copies hold no SM, a cast kernel holds SMs for all of its time)" % (share, cast.describe()))
    return baseline.backward, k * (1.0 - f) + cast.per_second * f


def _assumptions(ref, sc, table, nbuckets, gains):
    """The assumptions every prediction prints (list of str); gains: float [buckets], the link
    table's concurrency gain at each bucket's payload."""
    out = [
        "reference %s: %s, %d ranks, %s, %g MiB buckets, compression %s, batch %d per GPU, %s" % (
            ref.path, ref.model, ref.ranks, ref.transport, ref.cap_mb, ref.compression, ref.batch, ref.precision),
        "forward %.2f ms (input wait included), optimizer %.2f ms and host time outside the device step %.2f ms "
        "are the reference's (the slowest rank's medians)" % (ref.forward * 1e3, ref.optimizer * 1e3, ref.host_gap * 1e3),
        "buckets: %d (PyTorch DDP's rule over %s's parameters in reverse registration order, cap %g MiB, first "
        "%g MiB, a tensor never split)" % (nbuckets, ref.model, sc.cap_mb, sc.first_mb),
        _ready_assumption(ref),
        _stream_assumption(sc, table),
        "link table %s; alpha and busbw do not depend on the number of ranks (nccl-tests' busbw is meant to "
        "stay flat; ring latency that grows with the ranks is not modelled)" % table.name,
    ]
    if sc.compression == "powersgd":
        out.append("PowerSGD rank %d, min compression rate %g: bytes from its rule per tensor ((n+m) r x rate < n m) "
                   "at every step (the steps before its start step are not modelled)" % (sc.powersgd_rank, sc.powersgd_rate))
    for kind, comp in (("cast", ("fp16", "bf16")), ("powersgd", ("powersgd",))):
        if sc.compression in comp and not table.has(sc.transport, kind):
            out.append("the link table has no '%s' row: the compression's own work on the comm stream counts 0" % kind)
    if sc.transport == CE_TRANSPORT and sc.comm_streams > 1:
        g = np.asarray(gains)
        out.append("buckets in flight share the copy engines: with k >= 2 in flight each progresses at G / k of "
                   "its alone rate, G %s (the link table's concurrency rows%s)" % (
                       "%.3f" % g[0] if np.ptp(g) == 0 else "%.3f-%.3f over the buckets' payloads" % (g.min(), g.max()),
                       "" if table.has(sc.transport, "concurrency") else ": none, so G = 1, no gain from the streams"))
    out += table.notes
    return out


def _stream_assumption(sc, table):
    """How the buckets reach the link (str): one comm stream, or the copy-engine all-reduce's."""
    if sc.transport != CE_TRANSPORT:
        return ("one comm stream, buckets launched in order, each when its last gradient is ready; ranks in step "
                "(no skew between ranks)")
    n = sc.comm_streams
    where = ("one comm stream, bucket j starts at max(ready_j, end_{j-1})" if n == 1 else
             "bucket j on comm stream j mod %d, each stream in order, bucket j starts at max(ready_j, end_{j-%d})" % (n, n))
    return ("the copy-engine all-reduce (vitddp --allreduce copy-engine, mpi/transports/copy_engine_allreduce_gpu.h): "
            "per bucket peer-to-peer copies by the copy engines, a sum kernel on the bucket's comm stream beside "
            "backward, copies back; %s; a bucket's time alone is the link table's %s rows (cast + all-reduce); "
            "ranks in step (no skew between ranks)" % (where, sc.transport))


def _ready_assumption(ref):
    """Where the reference's gradient-ready curve came from (str)."""
    if ref.ready_source == "recorded":
        return ("gradient-ready times: recorded in the reference (--record-grad-ready, grad_ready/ready_time): "
                "%d groups, the slowest rank's median over the timed steps, against the gradient bytes complete "
                "at each (grad_ready/prefix_bytes); linear in the bytes between groups; the last bucket at the end "
                "of backward" % ref.ready_groups)
    return ("gradient-ready times: inferred (the reference has no grad_ready/ready_time; vitddp "
            "--record-grad-ready records them): %d of its %d buckets started on an idle comm stream and give the "
            "ready curve; elsewhere it is linear in the gradient bytes up to the end of backward" % (
                ref.idle_buckets, ref.num_buckets))


def prediction_text(p):
    """A Markdown report of Prediction `p`: the figures, then the assumptions."""
    ms = lambda s: "%.2f" % (s * 1e3)
    rows = [("step time (ms)", ms(p.step)), ("steps/s per GPU", "%.3f" % p.steps_per_second),
            ("images/s per GPU", "%.1f" % p.images_per_second),
            ("images/s, all %d GPUs" % p.scenario.ranks, "%.1f" % (p.images_per_second * p.scenario.ranks)),
            ("forward (ms)", ms(p.forward)), ("backward (ms)", ms(p.backward)),
            ("exposed communication (ms)", ms(p.exposed))]
    if p.scenario.mode == "zero1":
        rows.append(("ZeRO-1 parameter all-gather, in all / not hidden by forward (ms)",
                     "%s / %s" % (ms(p.allgather_total), ms(p.allgather))))
    rows += [("optimizer (ms)", ms(p.optimizer)), ("host time outside the device step (ms)", ms(p.host_gap)),
             ("comm-stream work per step (ms)", ms(p.comm_total)), ("buckets", str(p.buckets)),
             ("dominant term", p.dominant)]
    out = ["# Prediction: %s" % p.scenario.describe(), "", "| quantity | predicted |", "| --- | --- |"]
    out += ["| %s | %s |" % r for r in rows]
    out += ["", "Assumptions:", ""] + ["- " + a for a in p.assumptions]
    return "\n".join(out) + "\n"


def prediction_dict(p):
    """Prediction `p` as a JSON-ready dict (seconds, steps/s, images/s)."""
    sc = p.scenario
    return {"scenario": dict(sc.__dict__, gathered_dtype=sc.gathered_dtype()), "step_time_s": p.step, "steps_per_second_per_gpu": p.steps_per_second,
            "images_per_second_per_gpu": p.images_per_second, "forward_s": p.forward, "backward_s": p.backward,
            "exposed_comm_s": p.exposed, "optimizer_s": p.optimizer, "allgather_s": p.allgather,
            "allgather_total_s": p.allgather_total,
            "host_gap_s": p.host_gap, "comm_stream_s": p.comm_total, "buckets": p.buckets, "dominant": p.dominant,
            "assumptions": p.assumptions}
