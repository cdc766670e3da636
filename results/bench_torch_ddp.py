#!/usr/bin/env python3
"""PyTorch DDP twin of vitddp for the article's table (results/commands/article_table.sh).

Trains torchvision's vit_l_32 (random init, dropout 0) with the seed article's loop - SGD,
CrossEntropyLoss, a fixed random batch kept on the GPU (one per rank) - on one GPU per process,
under DistributedDataParallel, and reports throughput and peak memory. One process per GPU,
started by Open MPI's mpirun (no torchrun):

    mpirun -np 4 --bind-to none -x NCCL_NVLS_ENABLE=0 -x MASTER_PORT=29511 \\
        python3 results/bench_torch_ddp.py --bucket-cap-mb 2000 --static-graph --grad-as-bucket-view \\
        --comm-hook bf16 --json torch-ddp.json
    python3 results/bench_torch_ddp.py --no-ddp --precision bf16      # 1 GPU, no DDP, no process group

Each process reads its rank, the world size and its local rank (= its GPU) from
OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE / OMPI_COMM_WORLD_LOCAL_RANK (or RANK / WORLD_SIZE /
LOCAL_RANK as torchrun sets them; none of them: a single process), sets MASTER_ADDR=127.0.0.1 and
MASTER_PORT (default 29500, --master-port or the environment win) unless given, and calls
init_process_group("nccl"). One node only (MASTER_ADDR is this host).

DDP options, as torch.nn.parallel.DistributedDataParallel names them:
  --bucket-cap-mb MB        bucket_cap_mb (PyTorch default 25)
  --static-graph            static_graph=True
  --grad-as-bucket-view     gradient_as_bucket_view=True; the step then zeroes gradients in place
                            (zero_grad(set_to_none=False)) so they stay views of the buckets, as
                            PyTorch's documentation recommends; without it zero_grad() sets them to
                            None (torch's default)
  --comm-hook none|bf16|powersgd
                            bf16: default_hooks.bf16_compress_hook; powersgd: powerSGD_hook with
                            PowerSGDState(matrix_approximation_rank=--powersgd-rank (1),
                            start_powerSGD_iter=--powersgd-start-iter (2); PyTorch's default 1000
                            would never compress in a 30-step run; 2 is the smallest it accepts
                            with error feedback)
  --no-ddp                  plain model, no process group (1 process only): the 1-GPU baseline

PyTorch's other data-parallel strategies and the compiler (the multi-GPU peers of vitddp's DDP and
--shard-optimizer):
  --strategy ddp|zero1|fsdp ddp: DistributedDataParallel (default); zero1: DDP with
                            torch.distributed.optim.ZeroRedundancyOptimizer(optimizer_class=SGD or AdamW)
                            (ZeRO stage 1: each rank updates and keeps the state of its share of
                            the parameters, then broadcasts it); fsdp: FSDP2 (torch.distributed.fsdp
                            .fully_shard on every encoder block and on the whole model, one device
                            mesh over the ranks), under bf16 with MixedPrecisionPolicy(param_dtype=
                            bf16, reduce_dtype=fp32) so the parameters are all-gathered in bf16 and
                            the gradients reduce-scattered in fp32; the DDP options do not apply
  --fsdp-reshard-after-forward true|false
                            fully_shard's reshard_after_forward: true frees the gathered parameters
                            after forward and gathers them again for backward (ZeRO-3), false keeps
                            them to the end of backward (ZeRO-2-like) [true]
  --compile none|default|reduce-overhead|max-autotune
                            torch.compile of the (wrapped) model with that mode; with DDP, dynamo's
                            DDPOptimizer splits the graph at bucket boundaries so the all-reduces
                            still overlap backward [none]

Optimizer: --optimizer sgd (default: torch.optim.SGD(lr), the article's loop) or adamw:
torch.optim.AdamW(lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0), vitddp's --optimizer adamw
with its defaults (vitddp --help; note torch's own weight_decay default is 0.01), fused=True on
CUDA (PyTorch's fastest AdamW; the foreach implementation on the CPU); --strategy zero1 passes
the same class and arguments to ZeroRedundancyOptimizer.

Precisions as in results/bench_torch_vit.py: fp32 = strict (allow_tf32 False), tf32, bf16 =
torch.autocast("cuda", torch.bfloat16) around forward and loss (fp32 weights, gradients,
optimizer and all-reduce).

Timing: --warmup-steps untimed steps; then torch.cuda.synchronize(), a barrier over the ranks and
synchronize again; --steps steps; synchronize. steps/s per GPU = timed steps / the wall time of that
window on rank 0 (as vitddp's summary/steps_per_second, also per rank); the slowest rank's figure
is in steps_per_s_min. CUDA events around each timed step on rank 0 give the median step time.
TFLOP/s = 3 x forward FLOPs per image (bench_torch_vit.forward_flops_per_image, vitddp's formula)
x images/s per GPU. Peak memory: torch.cuda.max_memory_allocated() / max_memory_reserved() over
the whole run, the largest over the ranks.

Rank 0 prints one line "TORCHDDP key=value ..." and writes the same as JSON with --json. Exit 2 on
bad arguments, when no CUDA device is visible, or for --no-ddp with more than one process.
--device cpu (testing only: gloo, no GPU, time.perf_counter() instead of CUDA events, no memory
figures) checks the wiring on a machine without a GPU, e.g. with --model vit_b_32 --batch-size 2
--image-size 64.
"""
import argparse
import json
import os
import sys
import time


def env_int(*names, default=None):
    """The first of the environment variables `names` that is set, as an int, else `default`."""
    for n in names:
        v = os.environ.get(n)
        if v not in (None, ""):
            return int(v)
    return default


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="Details: the module docstring (head -60 %s)." % os.path.basename(__file__))
    ap.add_argument("--precision", choices=["fp32", "tf32", "bf16"], default="fp32", help="[fp32]")
    ap.add_argument("--model", default="vit_l_32", help="torchvision ViT constructor [vit_l_32]")
    ap.add_argument("--image-size", type=int, default=0,
                    help="input size passed to the constructor; 0 = the model's own (224) [0]")
    ap.add_argument("--batch-size", type=int, default=32, help="images per GPU per step [32]")
    ap.add_argument("--warmup-steps", type=int, default=10, help="[10]")
    ap.add_argument("--steps", type=int, default=20, help="timed steps [20]")
    ap.add_argument("--optimizer", choices=["sgd", "adamw"], default="sgd",
                    help="sgd: torch.optim.SGD; adamw: torch.optim.AdamW with vitddp's defaults (fused on CUDA) [sgd]")
    ap.add_argument("--lr", type=float, default=1e-3, help="learning rate [0.001]")
    ap.add_argument("--seed", type=int, default=0, help="[0]")
    ap.add_argument("--no-ddp", action="store_true", help="no DDP, no process group (1 process)")
    ap.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP bucket_cap_mb [25]")
    ap.add_argument("--static-graph", action="store_true", help="DDP static_graph=True")
    ap.add_argument("--grad-as-bucket-view", action="store_true", help="DDP gradient_as_bucket_view=True")
    ap.add_argument("--comm-hook", choices=["none", "bf16", "powersgd"], default="none", help="[none]")
    ap.add_argument("--powersgd-rank", type=int, default=1, help="matrix_approximation_rank [1]")
    ap.add_argument("--powersgd-start-iter", type=int, default=2, help="start_powerSGD_iter [2]")
    ap.add_argument("--strategy", choices=["ddp", "zero1", "fsdp"], default="ddp",
                    help="ddp: DistributedDataParallel; zero1: DDP + ZeroRedundancyOptimizer; fsdp: FSDP2 fully_shard [ddp]")
    ap.add_argument("--fsdp-reshard-after-forward", choices=["true", "false"], default="true",
                    help="--strategy fsdp: fully_shard's reshard_after_forward [true]")
    ap.add_argument("--compile", choices=["none", "default", "reduce-overhead", "max-autotune"], default="none",
                    help="torch.compile mode of the (wrapped) model [none]")
    ap.add_argument("--master-port", type=int, default=None,
                    help="rendezvous port on 127.0.0.1 (default: $MASTER_PORT, else 29500)")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                    help="cpu: testing only (gloo backend, no GPU) [cuda]")
    ap.add_argument("--json", help="rank 0 also writes the result to this JSON file")
    a = ap.parse_args(argv)
    if a.batch_size < 1 or a.steps < 1 or a.warmup_steps < 0:
        ap.error("--batch-size and --steps must be >= 1, --warmup-steps >= 0")
    if a.bucket_cap_mb <= 0:
        ap.error("--bucket-cap-mb must be > 0")
    if a.comm_hook == "powersgd" and a.powersgd_start_iter < 2:
        ap.error("--powersgd-start-iter must be >= 2 (PowerSGD's error feedback and warm start need it)")
    if a.no_ddp and (a.static_graph or a.grad_as_bucket_view or a.comm_hook != "none"):
        ap.error("--no-ddp excludes --static-graph, --grad-as-bucket-view and --comm-hook")
    if a.no_ddp and a.strategy != "ddp":
        ap.error("--strategy %s needs a process group: not with --no-ddp" % a.strategy)
    if a.strategy == "fsdp" and (a.static_graph or a.grad_as_bucket_view or a.comm_hook != "none"
                                 or a.bucket_cap_mb != 25.0):
        ap.error("--strategy fsdp: --static-graph, --grad-as-bucket-view, --comm-hook and --bucket-cap-mb are DDP's "
                 "options (FSDP2 has none of them)")
    if a.fsdp_reshard_after_forward != "true" and a.strategy != "fsdp":
        ap.error("--fsdp-reshard-after-forward needs --strategy fsdp")
    return a


def nccl_version(torch):
    """PyTorch's NCCL version as text ('2.28.9'), '' if it cannot say."""
    try:
        v = torch.cuda.nccl.version()
        return ".".join(map(str, v)) if isinstance(v, (tuple, list)) else str(v)
    except Exception:  # noqa: BLE001 - only a label
        return ""


def mode_label(a, ddp):
    """The results tables' column label of a non-default configuration (None for plain DDP / eager,
    which the tables name themselves)."""
    parts = []
    if ddp:
        parts.append({"ddp": "DDP", "zero1": "DDP + ZeroRedundancyOptimizer",
                      "fsdp": "FSDP2" + ("" if a.fsdp_reshard_after_forward == "true" else " (no reshard after forward)")}
                     [a.strategy])
    if a.compile != "none":
        parts.append("compile" if a.compile == "default" else "compile " + a.compile)
    if parts in ([], ["DDP"]):
        return None
    return " + ".join(parts)


def shard_fsdp2(torch, model, dev, world, bf16, reshard_after_forward):
    """FSDP2 over all ranks (torch.distributed.fsdp.fully_shard, PyTorch 2.6+): every encoder block
    its own unit, then the root (patch embedding, class token, positions, final LayerNorm, head), as
    the FSDP2 documentation shards transformers. Under bf16 MixedPrecisionPolicy(param_dtype=bf16,
    reduce_dtype=fp32): bf16 all-gathers, fp32 reduce-scatters, fp32 sharded parameters for the
    optimizer.
    Returns the model (sharded in place)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    mesh = init_device_mesh(dev.type, (world,))
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16 if bf16 else None, reduce_dtype=torch.float32)
    for layer in model.encoder.layers:
        fully_shard(layer, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard_after_forward)
    return model


ADAMW = {"betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0}  # vitddp's --adam-beta1/2, --adam-eps, --weight-decay


def optimizer_of(torch, a, cuda):
    """(optimizer class, its keyword arguments) of --optimizer: SGD(lr) or AdamW(lr, ADAMW), fused on
    CUDA."""
    if a.optimizer == "sgd":
        return torch.optim.SGD, {"lr": a.lr}
    return torch.optim.AdamW, dict(ADAMW, lr=a.lr, fused=cuda)


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def select_device(torch, a, local):
    """(torch.device, None), or (None, the one-line reason) when --device cuda has no GPU for this
    local rank. Sets TF32 for matmul and cuDNN as --precision says."""
    if a.device == "cuda":
        if not torch.cuda.is_available():
            return None, "no CUDA device visible"
        if local >= torch.cuda.device_count():
            return None, "local rank %d but only %d GPU(s) visible" % (local, torch.cuda.device_count())
        torch.cuda.set_device(local)
        dev = torch.device("cuda", local)
    else:
        dev = torch.device("cpu")
    torch.backends.cuda.matmul.allow_tf32 = a.precision == "tf32"
    torch.backends.cudnn.allow_tf32 = a.precision == "tf32"
    return dev, None


def wrap_model(torch, model, a, dev, local, world, ddp):
    """The module the step runs: `model` itself without DDP, FSDP2-sharded (--strategy fsdp), or in
    DistributedDataParallel with --bucket-cap-mb, static_graph, gradient_as_bucket_view and the
    --comm-hook (torch.distributed.algorithms.ddp_comm_hooks: bf16_compress_hook, powerSGD_hook)."""
    if not ddp:
        return model
    if a.strategy == "fsdp":
        return shard_fsdp2(torch, model, dev, world, a.precision == "bf16", a.fsdp_reshard_after_forward == "true")
    net = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[local] if dev.type == "cuda" else None, bucket_cap_mb=a.bucket_cap_mb,
        static_graph=a.static_graph, gradient_as_bucket_view=a.grad_as_bucket_view)
    if a.comm_hook == "bf16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        net.register_comm_hook(None, default_hooks.bf16_compress_hook)
    elif a.comm_hook == "powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=a.powersgd_rank,
                                            start_powerSGD_iter=a.powersgd_start_iter)
        net.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    return net


def time_steps(torch, step, a, cuda, sync, barrier):
    """Runs --warmup-steps then --steps of `step` (returns the loss); (losses, per-step ms of the timed
    steps: CUDA events on the GPU, perf_counter on the CPU, the timed window's wall seconds, the
    first step's seconds when it compiles else 0)."""
    losses, compile_s = [], 0.0
    for i in range(a.warmup_steps):
        c0 = time.perf_counter()
        losses.append(step())
        if i == 0 and a.compile != "none":
            sync()
            compile_s = time.perf_counter() - c0  # the first step compiles
    sync()
    barrier()
    sync()
    step_ms = []
    t0 = time.perf_counter()
    if cuda:
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(a.steps)]
        for e0, e1 in events:
            e0.record()
            losses.append(step())
            e1.record()
        sync()
        wall = time.perf_counter() - t0
        step_ms = [e0.elapsed_time(e1) for e0, e1 in events]
    else:
        for _ in range(a.steps):
            s0 = time.perf_counter()
            losses.append(step())
            step_ms.append(1e3 * (time.perf_counter() - s0))
        wall = time.perf_counter() - t0
    return losses, step_ms, wall, compile_s


def result_record(torch, torchvision, a, dev, world, ddp, timing, flops, peaks):
    """The JSON record of the run (the keys docs/benchmarks.md and the tables read): versions, the
    configuration, steps/s (this rank's and the slowest rank's), images/s, TFLOP/s (3 x forward
    FLOPs per image), the median step, peak memory and the first and last loss."""
    losses, step_ms, wall, compile_s = timing
    sps_min, peak_alloc, peak_res = peaks
    cuda = dev.type == "cuda"
    steps_per_s = a.steps / wall
    images_per_s = steps_per_s * a.batch_size
    r = {
        "framework": "pytorch",
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "device": torch.cuda.get_device_name(dev) if cuda else "cpu",
        "nccl": nccl_version(torch) if cuda else "",
        "world_size": world,
        "model": a.model,
        "precision": a.precision,
        "batch_size": a.batch_size,
        "ddp": int(ddp),
        "bucket_cap_mb": a.bucket_cap_mb if ddp else 0.0,
        "static_graph": int(ddp and a.static_graph),
        "gradient_as_bucket_view": int(ddp and a.grad_as_bucket_view),
        "comm_hook": a.comm_hook if ddp and a.strategy != "fsdp" else "none",
        "strategy": a.strategy if ddp else "none",
        "compile": a.compile,
        "optimizer": a.optimizer,
        "lr": a.lr,
        "compile_s": compile_s,
        "adamw": ({"betas": list(ADAMW["betas"]), "eps": ADAMW["eps"], "weight_decay": ADAMW["weight_decay"],
                   "fused": cuda} if a.optimizer == "adamw" else {}),
        "powersgd_start_iter": a.powersgd_start_iter if a.comm_hook == "powersgd" else 0,
        "powersgd_rank": a.powersgd_rank if a.comm_hook == "powersgd" else 0,
        "warmup_steps": a.warmup_steps,
        "steps": a.steps,
        "steps_per_s": steps_per_s,
        "steps_per_s_min": sps_min,
        "images_per_s": images_per_s,
        "images_per_s_total": images_per_s * world,
        "tflops": 3.0 * flops * images_per_s / 1e12,
        "median_step_ms": median(step_ms),
        "timed_window_s": wall,
        "forward_gflop_per_image": flops / 1e9,
        "peak_mem_allocated_bytes": peak_alloc,
        "peak_mem_reserved_bytes": peak_res,
        "loss_first": float(losses[0]),
        "loss_last": float(losses[-1]),
        "nccl_p2p_disable": os.environ.get("NCCL_P2P_DISABLE", ""),
        "nccl_shm_disable": os.environ.get("NCCL_SHM_DISABLE", ""),
    }
    label = mode_label(a, ddp)
    if label:
        r["mode"] = label
    return r


def main(argv=None):
    a = parse_args(argv)
    rank = env_int("OMPI_COMM_WORLD_RANK", "PMI_RANK", "RANK", default=0)
    world = env_int("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "WORLD_SIZE", default=1)
    local = env_int("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "LOCAL_RANK", default=0)
    if a.no_ddp and world != 1:
        print("bench_torch_ddp.py: --no-ddp runs one process, but %d were started" % world, file=sys.stderr)
        return 2

    # Imported here so that --help and the argument checks work without torch.
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_torch_vit import forward_flops_per_image
    import torch
    import torch.distributed as dist
    import torchvision

    dev, why = select_device(torch, a, local)
    if dev is None:
        print("bench_torch_ddp.py: " + why, file=sys.stderr)
        return 2
    cuda = dev.type == "cuda"
    bf16 = a.precision == "bf16"
    ddp = not a.no_ddp
    if ddp:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        if a.master_port is not None:
            os.environ["MASTER_PORT"] = str(a.master_port)
        os.environ.setdefault("MASTER_PORT", "29500")
        dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    def barrier():
        if ddp:
            if cuda:
                dist.barrier(device_ids=[local])
            else:
                dist.barrier()

    torch.manual_seed(a.seed)  # same initial weights everywhere (DDP broadcasts rank 0's anyway)
    kw = {"weights": None}
    if a.image_size:
        kw["image_size"] = a.image_size
    model = getattr(torchvision.models, a.model)(**kw).to(dev)
    model.train()
    flops = forward_flops_per_image(model)
    net = wrap_model(torch, model, a, dev, local, world, ddp)
    opt_class, opt_kw = optimizer_of(torch, a, cuda)
    if a.strategy == "zero1":
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=opt_class, **opt_kw)
    else:
        opt = opt_class(model.parameters(), **opt_kw)
    if a.compile != "none":
        net = torch.compile(net, mode=None if a.compile == "default" else a.compile)
    loss_fn = torch.nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(a.seed * 1000 + rank + 1)  # a different batch per rank
    images = torch.randn(a.batch_size, 3, model.image_size, model.image_size, generator=gen).to(dev)
    labels = torch.randint(0, model.num_classes, (a.batch_size,), generator=gen).to(dev)
    set_to_none = not (ddp and a.grad_as_bucket_view)

    def step():
        opt.zero_grad(set_to_none=set_to_none)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
            loss = loss_fn(net(images), labels)
        loss.backward()
        opt.step()
        return loss.detach()

    timing = time_steps(torch, step, a, cuda, sync, barrier)
    steps_per_s = a.steps / timing[2]
    peaks = (steps_per_s, torch.cuda.max_memory_allocated(dev) if cuda else 0,
             torch.cuda.max_memory_reserved(dev) if cuda else 0)
    if ddp:  # the slowest rank's throughput and the largest peak memory over the ranks
        t = torch.tensor([-steps_per_s, float(peaks[1]), float(peaks[2])], dtype=torch.float64, device=dev)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        peaks = (-float(t[0]), int(t[1]), int(t[2]))
    r = result_record(torch, torchvision, a, dev, world, ddp, timing, flops, peaks)
    if rank == 0:
        print("TORCHDDP " + " ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()),
              flush=True)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(r, f, indent=1)
    if ddp:
        barrier()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
