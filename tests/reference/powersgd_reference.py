#!/usr/bin/env python3
"""Reference outputs of PyTorch's own powerSGD_hook, for tests/cpu/test_powersgd_reference.cpp.

Runs torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook.powerSGD_hook unchanged in one
process (world size 1, gloo process group on the CPU, no network) on fixed small gradients, for a
few configurations, 5 steps each with start_powerSGD_iter=2 (steps 0 and 1 vanilla all-reduce,
steps 2, 3, 4 compressed; PyTorch refuses start_powerSGD_iter <= 1 with error feedback or warm
start), and prints everything to stdout as text:

    python3 tests/reference/powersgd_reference.py > tests/data/powersgd_reference.txt

The hook is driven with a minimal stand-in for dist.GradBucket (buffer / gradients / index /
is_last, as DDP's reducer hands them over). The random initial Qs PyTorch draws are recorded by
wrapping torch.randn while the hook runs, so that the C++ test can inject the same ones.

Format (one record per line, whitespace separated, floats with 9 significant digits):
    powersgd_reference 1
    torch <version>
    config <name> rank <r> min_rate <x> start <s> error_feedback <0|1> warm_start <0|1> steps <n>
    bucket <b> <shape> <shape> ...           shapes as 8x6, 5, 4x3x2 (tensors contiguous in order)
    step <t> bucket <b>                      one hook call, in call order
    input <numel> v ...                      the bucket before the hook
    q <ordinal> <m> <r> v ...                Qs drawn in this call (ordinal: randn call order)
    output <numel> v ...                     the bucket after the hook
    error <numel> v ...                      state.error_dict[b] after the hook (0 values if none)
    end_config
    end
"""
import sys

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

# Buckets of the test model: bucket 0 repeats a shape (PyTorch groups compressed tensors by
# shape), has a 1-D tensor and a 2x12 matrix that is never worth compressing.
BUCKETS = [
    [(8, 6), (5,), (7, 7), (2, 4, 3), (8, 6)],
    [(4, 3, 2), (3,), (6, 5)],
]

CONFIGS = [
    # name, rank, min_compression_rate, use_error_feedback, warm_start
    ("rank1", 1, 2.0, True, True),
    ("rank2_rate1", 2, 1.0, True, True),
    ("rank1_no_ef_no_ws", 1, 2.0, False, False),
    ("rank3_rate1", 3, 1.0, True, True),  # fp32 rank > 2: PyTorch orthogonalises with QR
]
START = 2
STEPS = 5


class Bucket:
    """The part of dist.GradBucket that powerSGD_hook uses (current and older method names)."""

    def __init__(self, index, count, shapes, values):
        self._index = index
        self._count = count
        self._buffer = values
        self._grads = []
        off = 0
        for s in shapes:
            n = int(np.prod(s))
            self._grads.append(self._buffer[off:off + n].view(*s))
            off += n

    def buffer(self):
        return self._buffer

    def gradients(self):
        return self._grads

    def index(self):
        return self._index

    def is_last(self):
        return self._index == self._count - 1

    def parameters(self):
        return self._grads

    # Names of older PyTorch releases.
    get_tensor = buffer
    get_per_parameter_tensors = gradients
    get_index = index
    is_the_last_bucket_to_allreduce = is_last


def fmt(values):
    return " ".join(format(float(v), ".9g") for v in values)


def shape_str(s):
    return "x".join(str(d) for d in s)


def run_config(out, name, rank, rate, ef, ws):
    state = psgd.PowerSGDState(
        process_group=None,
        matrix_approximation_rank=rank,
        start_powerSGD_iter=START,
        min_compression_rate=rate,
        use_error_feedback=ef,
        warm_start=ws,
        random_seed=0,
    )
    out.write(f"config {name} rank {rank} min_rate {rate:g} start {START} error_feedback {int(ef)} "
              f"warm_start {int(ws)} steps {STEPS}\n")
    for b, shapes in enumerate(BUCKETS):
        out.write(f"bucket {b} " + " ".join(shape_str(s) for s in shapes) + "\n")
    rng = np.random.RandomState(1234)
    real_randn = torch.randn
    for step in range(STEPS):
        for b, shapes in enumerate(BUCKETS):
            numel = sum(int(np.prod(s)) for s in shapes)
            x = torch.tensor(rng.standard_normal(numel), dtype=torch.float32)
            out.write(f"step {step} bucket {b}\ninput {numel} {fmt(x.tolist())}\n")
            drawn = []

            def recording_randn(*args, **kwargs):
                t = real_randn(*args, **kwargs)
                drawn.append(t.detach().clone())
                return t

            torch.randn = recording_randn
            try:
                fut = psgd.powerSGD_hook(state, Bucket(b, len(BUCKETS), shapes, x))
                fut.wait()
            finally:
                torch.randn = real_randn
            for k, q in enumerate(drawn):
                m, r = q.shape[-2], q.shape[-1]
                out.write(f"q {k} {m} {r} {fmt(q.reshape(-1).tolist())}\n")
            out.write(f"output {numel} {fmt(x.tolist())}\n")
            err = state.error_dict.get(b)
            if err is None:
                out.write("error 0\n")
            else:
                out.write(f"error {err.numel()} {fmt(err.tolist())}\n")
    out.write("end_config\n")


def main():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    torch.manual_seed(0)
    out = sys.stdout
    out.write("powersgd_reference 1\n")
    out.write(f"torch {torch.__version__}\n")
    for c in CONFIGS:
        run_config(out, *c)
    out.write("end\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
