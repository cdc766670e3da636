"""Run-level metrics of one results file, for `vitddp-report summary` and `compare`.

`run_metrics(run)` returns one flat dict: the configuration that matters for a communication study
and the measured figures, every value a str, int, float or None (not in the file / not
applicable). CONFIG_FIELDS and METRIC_FIELDS list the keys in report order with their units.
"""
import numpy as np

from .bandwidth import BucketBandwidth
from .reader import ResultsError, text

# Measured dense-matmul ceilings of one NVIDIA H200 (8192^3 torch.matmul, TFLOP/s), the MFU
# reference when the file does not carry its own (summary/mfu).
H200_CEILING_TFLOPS = {"bf16": 781.0, "tf32": 361.0, "fp32": 51.0}

CONFIG_FIELDS = [  # (key, label)
    ("model", "model"), ("world_size", "world size"), ("backend", "backend"),
    ("batch_size", "batch per rank"), ("grad_accum_steps", "grad accumulation"),
    ("precision", "precision"), ("compression", "compression"), ("collectives", "collectives"),
    ("allreduce", "transport (--allreduce)"),
    ("attention", "attention"), ("data", "data source"), ("ddp", "DDP"), ("overlap", "overlap"),
    ("bucket_cap_mb", "bucket cap (MiB)"), ("num_buckets", "buckets"),
]

METRIC_FIELDS = [  # (key, label, units)
    ("timed_steps", "timed steps", "1"),
    ("steps_per_second", "steps/s", "steps/s"),
    ("images_per_second", "images/s (all ranks)", "images/s"),
    ("tflops_per_rank", "TFLOP/s per rank", "TFLOP/s"),
    ("mfu", "MFU", "1"),
    ("step_time_min_ms", "step time min", "ms"),
    ("step_time_median_ms", "step time median", "ms"),
    ("step_time_p90_ms", "step time p90", "ms"),
    ("step_time_max_ms", "step time max", "ms"),
    ("step_time_cv", "step time CV", "1"),
    ("exposed_comm_median_ms", "exposed comm median", "ms"),
    ("algbw_gbps", "algbw median", "GB/s"),
    ("busbw_gbps", "busbw median", "GB/s"),
    ("peak_memory_gib", "peak memory", "GiB"),
]

RATIO_FIELDS = ["steps_per_second", "images_per_second", "exposed_comm_median_ms", "busbw_gbps",
                "peak_memory_gib"]


def spread(values):
    """Spread of a 1-D sample: dict min, median, p90 (numpy's linear interpolation between order
    statistics, numpy.percentile's default), max, cv (coefficient of variation: sample standard
    deviation, ddof=1, over the mean; 0 for a single value). Units those of `values`.
    ValueError on an empty sample."""
    v = np.asarray(values, dtype=float).reshape(-1)
    if v.size == 0:
        raise ValueError("empty sample")
    mean = float(v.mean())
    sd = float(v.std(ddof=1)) if v.size > 1 else 0.0
    return {"min": float(v.min()), "median": float(np.median(v)), "p90": float(np.percentile(v, 90)),
            "max": float(v.max()), "cv": sd / mean if mean else float("nan")}


def config(run):
    """The configuration keys of CONFIG_FIELDS for `run` (str/int/float values)."""
    return {
        "model": run.model, "world_size": run.world_size, "backend": run.backend,
        "batch_size": run.batch_size, "grad_accum_steps": run.grad_accum_steps,
        "precision": run.precision, "compression": run.compression,
        "collectives": text(run.attr("collectives", "all-reduce" if run.ddp else "none (no DDP)")),
        "allreduce": run.allreduce if run.backend != "cpu" else "mpi (CPU backend)",
        "attention": text(run.attr("attention", run.option("attention", "n/a"))),
        "data": run.option("data", "n/a"), "ddp": "yes" if run.ddp else "no",
        "overlap": "yes" if run.overlap else "no",
        "bucket_cap_mb": run.bucket_cap_mb if run.ddp else None,
        "num_buckets": run.num_buckets if run.ddp else None,
    }


def _peak_memory_gib(run):
    """Peak device memory in GiB from summary/peak_memory_bytes or the root attribute
    peak_memory_bytes (int or per-rank array: the largest), else None."""
    v = run.summary_or("peak_memory_bytes")
    if v is None:
        a = run.attr("peak_memory_bytes", None)
        if a is None:
            return None
        v = float(np.max(np.asarray(a, dtype=float)))
    return v / 2**30


def run_metrics(run):
    """Configuration and metrics of one run as a flat dict (keys: "file", CONFIG_FIELDS,
    METRIC_FIELDS, "images_per_second_file"). Timed steps only (steps/timed == 1):
      - steps/s: summary/steps_per_second (timed optimizer steps / host wall time, rank 0);
      - images/s: steps/s x batch x grad accumulation x world size (Run.images_per_second);
      - TFLOP/s per rank: 3 x forward_flops_per_image x images/s / world size / 1e12;
      - MFU: summary/mfu when the file has it, else TFLOP/s over the H200 matmul ceiling of the
        precision for runs on H200 GPUs, else None;
      - step time: timing/step_time (device), the slowest rank of each step, spread() in ms;
      - exposed comm: median over the timed steps of the slowest rank's timing/exposed_comm (ms;
        None without DDP);
      - algbw/busbw: BucketBandwidth.median_algbw/median_busbw (None without per-bucket times);
      - peak memory: where the file records it.
    ResultsError when the file has no summary (the run ended before its timed window)."""
    if not run.has("summary/steps_per_second"):
        kind = text(run.attr("format", None) or run.attr("program", None) or "")
        if kind in ("vitddp-checkpoint", "vitddp-weights", "vitddp-probe"):
            raise ResultsError("%s: a %s file, not the results file of a training run (vitddp --out)%s" % (
                run.path, kind, "; give it with --probe" if kind == "vitddp-probe" else ""))
        reason = run.attr("stop_reason", None)
        raise ResultsError("%s: no summary/steps_per_second (%s)" % (
            run.path, "stop_reason: %s" % text(reason) if reason is not None else "the run ended before its timed window"))
    m = {"file": run.name}
    m.update(config(run))
    timed = run.timed()
    m["timed_steps"] = int(timed.sum())
    sps = run.summary("steps_per_second")
    m["steps_per_second"] = sps
    ips = run.images_per_second()
    m["images_per_second"] = ips
    m["images_per_second_file"] = run.summary_or("images_per_second")
    flops = run.attr("forward_flops_per_image", None)
    m["tflops_per_rank"] = 3.0 * float(flops) * ips / run.world_size / 1e12 if flops is not None else None
    mfu = run.summary_or("mfu")
    if mfu is None and m["tflops_per_rank"] is not None and run.backend == "gpu":
        names = [text(x) for x in np.asarray(run.attr("device_names", [])).reshape(-1)]
        ceiling = H200_CEILING_TFLOPS.get(run.precision)
        if names and all("H200" in n for n in names) and ceiling:
            mfu = m["tflops_per_rank"] / ceiling
    m["mfu"] = mfu
    st = spread(run.step_series("timing/step_time")[:, timed].max(axis=0) * 1e3)
    for k in ("min", "median", "p90", "max"):
        m["step_time_%s_ms" % k] = st[k]
    m["step_time_cv"] = st["cv"]
    # A run without DDP has no communication to expose (its timing/exposed_comm is event-timing noise,
    # ~1e-7 s): n/a, so that compare gives no ratio against it.
    m["exposed_comm_median_ms"] = float(np.median(
        run.step_series("timing/exposed_comm")[:, timed].max(axis=0))) * 1e3 if run.ddp else None
    m["algbw_gbps"] = m["busbw_gbps"] = None
    if run.ddp and run.has("buckets/allreduce_time"):
        bw = BucketBandwidth(run)
        m["algbw_gbps"] = bw.median_algbw()
        m["busbw_gbps"] = bw.median_busbw()
    m["peak_memory_gib"] = _peak_memory_gib(run)
    return m
