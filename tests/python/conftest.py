"""Small vitddp results files written with h5py following docs/schema.md, for the tests of
vitddp_tools (pip install ./results). No GPU, no vitddp binary."""
import h5py
import numpy as np
import pytest


def pytest_addoption(parser):
    parser.addoption("--peers", action="store_true",
                     help="also run the tests marked peers: PyTorch's and JAX's own runs on the CPU (need torch, "
                          "torchvision, jax and mpirun); without it they are deselected, as CTest's gpu label is "
                          "left out on a machine without a GPU")


def pytest_configure(config):
    config.addinivalue_line("markers", "peers: runs PyTorch or JAX (results/peers, results/bench_torch_ddp.py)")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--peers"):
        return
    peers = [i for i in items if i.get_closest_marker("peers")]
    if peers:
        config.hook.pytest_deselected(items=peers)
        items[:] = [i for i in items if not i.get_closest_marker("peers")]


def write_run(path, *, world_size=2, batch_size=8, grad_accum=1, timed=(0, 1, 1, 0), step_time=None,
              exposed=None, bytes_sent=None, allreduce_time=None, bucket_bytes=None, compression="none",
              sps=10.0, summary_ips=None, precision="fp32", backend="cpu", options=None, attrs=None,
              eval_curve=None, with_bucket_times=True, reduce_scattered=None):
    """Writes a results file at `path`. Shapes: S = len(timed) steps, R = world_size ranks,
    B buckets (from bucket_bytes, default two). Arrays given as nested lists:
      step_time, exposed: [R, S] seconds (defaults: 0.1 s, 0.001 s everywhere);
      bytes_sent: [R, S, B] int bytes (default: bucket_bytes, halved for fp16/bf16);
      allreduce_time: [R, S, B] seconds (default 0.001);
      reduce_scattered: 0 or 1 for every bucket (buckets/reduce_scattered, --shard-optimizer; default: absent).
    Returns `path`."""
    S, R = len(timed), world_size
    bucket_bytes = np.asarray(bucket_bytes if bucket_bytes is not None else [4_000_000, 1_000_000], dtype=np.int64)
    B = bucket_bytes.size
    step_time = np.full((R, S), 0.1) if step_time is None else np.asarray(step_time, dtype=float)
    exposed = np.full((R, S), 0.001) if exposed is None else np.asarray(exposed, dtype=float)
    half = compression in ("fp16", "bf16")
    if bytes_sent is None:
        bytes_sent = np.broadcast_to(bucket_bytes // (2 if half else 1), (R, S, B))
    if allreduce_time is None:
        allreduce_time = np.full((R, S, B), 0.001)
    opts = {"bucket-cap-mb": "25", "compression": compression, "grad-accum-steps": str(grad_accum),
            "data": "synthetic", "allreduce": "mpi" if backend == "cpu" else "nccl", "lr": "0.001",
            "out": str(path)}
    opts.update(options or {})
    with h5py.File(path, "w") as f:
        a = {"program": "vitddp", "model": "vit_micro", "world_size": R, "batch_size": batch_size,
             "global_batch_size": batch_size * R, "backend": backend, "precision": precision,
             "attention": "cpu reference", "compression": compression, "ddp": 1, "overlap": 1,
             "num_buckets": B, "forward_flops_per_image": 1e9, "stop_reason": "completed"}
        a.update(attrs or {})
        for k, v in a.items():
            f.attrs[k] = v
        for k, v in opts.items():
            f.attrs["option." + k] = v

        def series(name, data, units, axes):
            d = f.create_dataset(name, data=data)
            d.attrs["units"], d.attrs["axes"], d.attrs["description"] = units, axes, name
        for name in ("data_wait", "input_wait", "forward", "backward", "optimizer", "wall_time"):
            series("timing/" + name, np.full((R, S), 0.01), "s", "rank,step")
        series("timing/step_time", step_time, "s", "rank,step")
        series("timing/exposed_comm", exposed, "s", "rank,step")
        series("training/loss", np.full((R, S), 2.3), "1", "rank,step")
        series("steps/timed", np.asarray([timed], dtype=np.int64), "1", "rank,step")
        if with_bucket_times:
            series("buckets/allreduce_start", np.full((R, S, B), 0.001), "s", "rank,step,bucket")
            series("buckets/allreduce_end", np.full((R, S, B), 0.002), "s", "rank,step,bucket")
            series("buckets/allreduce_time", np.asarray(allreduce_time, dtype=float), "s", "rank,step,bucket")
            series("buckets/compress_time", np.zeros((R, S, B)), "s", "rank,step,bucket")
            if bytes_sent is not False:
                series("buckets/bytes_sent", np.asarray(bytes_sent, dtype=np.int64), "bytes", "rank,step,bucket")
                series("buckets/compressed", np.full((R, S, B), 1 if half else 0, dtype=np.int64), "1",
                       "rank,step,bucket")
            if reduce_scattered is not None:
                series("buckets/reduce_scattered", np.full((R, S, B), reduce_scattered, dtype=np.int64), "1",
                       "rank,step,bucket")
        d = f.create_dataset("buckets/bytes", data=bucket_bytes)
        d.attrs["units"] = "bytes"
        ips = sps * batch_size * R if summary_ips is None else summary_ips
        for k, v, u in (("steps_per_second", sps, "steps/s"), ("images_per_second", ips, "images/s"),
                        ("images_per_second_per_rank", ips / R, "images/s"), ("tflops_per_rank", 0.0, "TFLOP/s"),
                        ("median_step_time", 0.1, "s"), ("nonfinite_steps", 0.0, "1")):
            d = f.create_dataset("summary/" + k, data=float(v))
            d.attrs["units"] = u
        if eval_curve is not None:
            for k, v in eval_curve.items():
                series("eval/" + k, np.asarray([v]), "s" if k == "time" else "1", "rank,step")
    return path


@pytest.fixture
def make_run(tmp_path):
    """make_run(name, **kw): write_run into the test's temporary folder; returns the path (str)."""
    def make(name, **kw):
        return str(write_run(tmp_path / name, **kw))
    return make
