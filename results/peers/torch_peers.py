#!/usr/bin/env python3
"""PyTorch peers of vitddp's training step: one process per (model, batch, precision, mode).

    python3 results/peers/torch_peers.py --model vit_l_32 --batch-size 32 --precision bf16 \
        --mode cudagraph --json torch-cudagraph.json
    python3 results/peers/torch_peers.py --gemm-ceilings --model vit_l_32 --batch-size 32 --json gemm.json

The step is vitddp's (`vitddp --no-ddp --data device`): torchvision's VisionTransformer (random
init, dropout 0 as torchvision's default), one fixed random batch already on the device, mean
cross-entropy (torch.nn.functional.cross_entropy), SGD (lr 1e-3, no momentum, no weight decay) on
fp32 weights. Precisions, as PyTorch users get them:
  fp32  torch.backends.cuda.matmul.allow_tf32 = False, torch.backends.cudnn.allow_tf32 = False
  tf32  both True
  bf16  torch.autocast(bfloat16) around forward and loss (fp32 weights and SGD, no grad scaler)

Modes:
  eager                    the plain loop: zero_grad(set_to_none=True), forward + loss, backward,
                           optimizer.step() (torch.optim.SGD, its default foreach implementation).
  cudagraph                the whole step (forward, loss, backward, SGD step) captured once with
                           torch.cuda.graph after warm-up steps on a side stream, then replayed:
                           PyTorch's "CUDA Graphs" notes, "Whole-network capture" example (grads set
                           to None before capture, so backward allocates them from the graph's
                           pool; autocast with cache_enabled=False, as those notes require). Of the
                           --warmup-steps, all but the last run eager on a side stream before the
                           capture, the last is the graph's first replay.
  compile-reduce-overhead  torch.compile(mode="reduce-overhead") of forward + loss (inductor
  compile-max-autotune     kernels, CUDA graphs via cudagraph trees; max-autotune also autotunes
                           GEMM and conv templates); backward is the compiled backward graph
                           (AOTAutograd). torch.compiler.cudagraph_mark_step_begin() starts every
                           step. The SGD step runs eager by default (--optimizer-step compiled
                           wraps optimizer.step() in torch.compile, as PyTorch's "Compiling the
                           optimizer with torch.compile" recipe does).

Timing: --warmup-steps untimed steps (they include compilation and graph capture), then --steps
timed steps between two synchronizations. steps_per_s = timed steps / host wall time of that window
(the definition of vitddp's summary/steps_per_second, so the table compares like with like);
steps_per_s_events = timed steps / CUDA-event time from the first timed step's start to the last
one's end; median_step_ms from a pair of CUDA events around every timed step. images_per_s =
steps_per_s x batch; tflops = 3 x forward FLOPs per image x images_per_s (vitddp's formula,
vit_shapes.forward_flops_per_image). Peak memory: torch.cuda.max_memory_allocated() and
max_memory_reserved() over the whole process. compile_s: host wall time of the first step (for
the compile modes: compilation of forward and backward); warmup_s: the whole warm-up incl. capture.

--gemm-ceilings instead times torch.matmul at the four linear layers of one encoder block (QKV,
out-projection, MLP up, MLP down; M = batch x tokens rows) in each precision, the three GEMMs each
costs in training (forward y = x W^T, data gradient dy W, weight gradient dy^T x, with those
operand layouts), and reports each one's TFLOP/s and the FLOP-weighted ceilings (sum of FLOPs / sum
of times): `train_tflops` over all twelve, `forward_tflops` over the four forward ones.

Output: one line "TORCH_PEER {json}" (or "GEMM_CEILINGS {json}") on stdout, the same JSON object
in --json FILE. Exit 2 on bad arguments (one line naming the option), or when --device cuda has no
CUDA device.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vit_shapes  # noqa: E402

MODES = ("eager", "cudagraph", "compile-reduce-overhead", "compile-max-autotune")


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    vit_shapes.add_step_arguments(ap)
    ap.add_argument("--mode", default="eager", choices=MODES)
    ap.add_argument("--optimizer-step", default="eager", choices=["eager", "compiled"],
                    help="compile modes: run optimizer.step() eager or under torch.compile [eager]")
    vit_shapes.add_run_arguments(ap)
    ap.add_argument("--gemm-ceilings", action="store_true",
                    help="time the model's linear-layer GEMMs per precision instead of training")
    ap.add_argument("--gemm-precisions", default="bf16,tf32,fp32", help="with --gemm-ceilings [bf16,tf32,fp32]")
    ap.add_argument("--gemm-iters", type=int, default=20, help="with --gemm-ceilings: products per timing [20]")
    ap.add_argument("--gemm-repeats", type=int, default=5, help="with --gemm-ceilings: timings per GEMM, median [5]")
    a = ap.parse_args(argv)
    vit_shapes.check_run_arguments(ap, a)
    if a.mode == "cudagraph" and a.warmup_steps < 2:
        ap.error("--warmup-steps must be >= 2 with --mode cudagraph (eager steps before the capture, one replay after)")
    if a.mode == "cudagraph" and a.device != "cuda":
        ap.error("--mode cudagraph needs --device cuda")
    precs = [p for p in a.gemm_precisions.split(",") if p]
    if not precs or any(p not in vit_shapes.PRECISIONS for p in precs):
        ap.error("--gemm-precisions: a comma-separated list of bf16, tf32, fp32")
    a.gemm_precisions = precs
    if a.gemm_iters < 1 or a.gemm_repeats < 1:
        ap.error("--gemm-iters and --gemm-repeats must be >= 1")
    return a


def set_precision(torch, precision):
    """TF32 switches for `precision` (tf32: on; fp32 and bf16: off, bf16's matmuls run in bf16)."""
    tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32


def versions(torch):
    v = vit_shapes.base_versions()
    import torchvision
    v.update(torch=torch.__version__, torchvision=torchvision.__version__, cuda=torch.version.cuda,
             cudnn=torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None)
    try:
        import triton
        v["triton"] = triton.__version__
    except ImportError:
        pass
    return v


def build_vit(size):
    """torchvision VisionTransformer of `size` (vit_shapes.ViTSize), random init, as the named
    constructors (torchvision.models.vit_l_32(weights=None), ...) build it."""
    import torchvision
    from torchvision.models.vision_transformer import VisionTransformer
    if size.name in ("vit_b_32", "vit_b_16", "vit_l_32", "vit_l_16", "vit_h_14"):
        return getattr(torchvision.models, size.name)(weights=None)
    return VisionTransformer(image_size=size.image_size, patch_size=size.patch_size, num_layers=size.layers,
                             num_heads=size.heads, hidden_dim=size.hidden, mlp_dim=size.mlp_dim,
                             num_classes=size.num_classes)


def make_train_loss(torch, vit, bf16, device_type, autocast_cache):
    """Module (images [B,3,H,W] fp32, labels [B] int64) -> mean cross-entropy (0-d fp32): the
    forward and loss of one step, under torch.autocast(bfloat16) when `bf16`."""
    F = torch.nn.functional

    class TrainLoss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.vit = vit

        def forward(self, images, labels):
            with torch.autocast(device_type, dtype=torch.bfloat16, enabled=bf16, cache_enabled=autocast_cache):
                return F.cross_entropy(self.vit(images), labels)

    return TrainLoss()


def gemm_ceilings(torch, a, size, dev):
    """--gemm-ceilings: per precision, TFLOP/s of each training GEMM of the block's linear layers
    (median over --gemm-repeats timings of --gemm-iters products, CUDA events; host clock on the
    CPU) and the FLOP-weighted ceilings. Returns the result dict."""
    cuda = dev.type == "cuda"
    out = {"kind": "gemm_ceilings", "model": size.name, "batch_size": a.batch_size, "device": str(dev),
           "device_name": torch.cuda.get_device_name(dev) if cuda else "cpu", "ceilings": {},
           "versions": versions(torch)}
    gen = torch.Generator(device=dev).manual_seed(a.seed)
    for prec in a.gemm_precisions:
        set_precision(torch, prec)
        dtype = torch.bfloat16 if prec == "bf16" else torch.float32
        rows = []
        for name, m, k, n in vit_shapes.linear_shapes(size, a.batch_size):
            x = torch.randn(m, k, device=dev, dtype=dtype, generator=gen)
            w = torch.randn(n, k, device=dev, dtype=dtype, generator=gen)
            dy = torch.randn(m, n, device=dev, dtype=dtype, generator=gen)
            operands = {"fwd": (x, w.t()), "dgrad": (dy, w), "wgrad": (dy.t(), x)}
            for pas, r, inner, c in vit_shapes.training_gemms(m, k, n):
                lhs, rhs = operands[pas]
                assert lhs.shape == (r, inner) and rhs.shape == (inner, c)
                res = torch.empty(r, c, device=dev, dtype=dtype)
                for _ in range(5):
                    torch.matmul(lhs, rhs, out=res)
                times = []
                for _ in range(a.gemm_repeats):
                    if cuda:
                        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        e0.record()
                    t0 = time.perf_counter()
                    for _ in range(a.gemm_iters):
                        torch.matmul(lhs, rhs, out=res)
                    if cuda:
                        e1.record()
                        e1.synchronize()
                        times.append(e0.elapsed_time(e1) / 1e3 / a.gemm_iters)
                    else:
                        times.append((time.perf_counter() - t0) / a.gemm_iters)
                t = vit_shapes.median(times)
                flops = 2.0 * r * inner * c
                rows.append({"linear": name, "pass": pas, "m": r, "k": inner, "n": c, "flops": flops,
                             "ms": t * 1e3, "tflops": flops / t / 1e12})
        out["ceilings"][prec] = {
            "train_tflops": vit_shapes.weighted_ceiling((g["flops"], g["tflops"]) for g in rows),
            "forward_tflops": vit_shapes.weighted_ceiling((g["flops"], g["tflops"]) for g in rows if g["pass"] == "fwd"),
            "gemms": rows,
        }
    return out


def train(torch, a, size, dev):
    """The benchmark of one mode. Returns the result dict."""
    cuda = dev.type == "cuda"
    set_precision(torch, a.precision)
    bf16 = a.precision == "bf16"
    torch.manual_seed(a.seed)
    vit = build_vit(size).to(dev)
    vit.train()
    train_loss = make_train_loss(torch, vit, bf16, dev.type, autocast_cache=a.mode != "cudagraph")
    opt = torch.optim.SGD(vit.parameters(), lr=a.lr, momentum=0.0)
    images = torch.randn(a.batch_size, 3, size.image_size, size.image_size, device=dev)
    labels = torch.randint(0, size.num_classes, (a.batch_size,), device=dev)
    compiled = a.mode.startswith("compile-")
    forward = torch.compile(train_loss, mode=a.mode[len("compile-"):]) if compiled else train_loss
    opt_step = opt.step
    if compiled and a.optimizer_step == "compiled":
        @torch.compile(fullgraph=False)
        def opt_step():
            opt.step()

    def step():
        if compiled:
            torch.compiler.cudagraph_mark_step_begin()
        opt.zero_grad(set_to_none=True)
        loss = forward(images, labels)
        loss.backward()
        opt_step()
        return loss

    sync = torch.cuda.synchronize if cuda else (lambda: None)
    graph = None
    t_warm = time.perf_counter()
    if a.mode == "cudagraph":
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            t0 = time.perf_counter()
            loss_first = float(step().detach())
            first_step_s = time.perf_counter() - t0
            for _ in range(a.warmup_steps - 2):
                step()
        torch.cuda.current_stream().wait_stream(side)
        sync()
        t0 = time.perf_counter()
        graph = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            static_loss = train_loss(images, labels)
            static_loss.backward()
            opt.step()
        sync()
        capture_s = time.perf_counter() - t0

        def step():  # noqa: F811 - the replayed graph is the step from here on
            graph.replay()
            return static_loss
        step()  # the last warm-up step: the graph's first launch (its upload)
    else:
        capture_s = None
        loss_first = None
        first_step_s = None
        for i in range(a.warmup_steps):
            t0 = time.perf_counter()
            loss = step()
            if i == 0:
                loss_first = float(loss.detach())
                first_step_s = time.perf_counter() - t0
    sync()
    warmup_s = time.perf_counter() - t_warm

    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(a.steps)] if cuda else None
    step_wall = []
    t0 = time.perf_counter()
    for i in range(a.steps):
        ts = time.perf_counter()
        if cuda:
            events[i][0].record()
        loss = step()
        if cuda:
            events[i][1].record()
        else:
            step_wall.append(time.perf_counter() - ts)
    sync()
    wall = time.perf_counter() - t0
    loss_last = float(loss.detach())
    if loss_first is None:  # --warmup-steps 0: the first timed step's loss
        loss_first = loss_last if a.steps == 1 else None
    if cuda:
        step_ms = [e0.elapsed_time(e1) for e0, e1 in events]
        window_events_s = events[0][0].elapsed_time(events[-1][1]) / 1e3
    else:
        step_ms = [t * 1e3 for t in step_wall]
        window_events_s = None

    steps_per_s = a.steps / wall
    images_per_s = steps_per_s * a.batch_size
    return {
        "kind": "peer", "tool": "torch", "mode": a.mode,
        "optimizer_step": a.optimizer_step if compiled else ("graph" if a.mode == "cudagraph" else "eager"),
        "model": size.name, "batch_size": a.batch_size, "precision": a.precision, "lr": a.lr, "seed": a.seed,
        "device": str(dev), "device_name": torch.cuda.get_device_name(dev) if cuda else "cpu",
        "warmup_steps": a.warmup_steps, "steps": a.steps,
        "timed_window_s": wall,
        "steps_per_s": steps_per_s,
        "steps_per_s_events": a.steps / window_events_s if window_events_s else None,
        "images_per_s": images_per_s,
        "tflops": vit_shapes.train_tflops(size, images_per_s),
        "forward_flops_per_image": vit_shapes.forward_flops_per_image(size),
        "median_step_ms": vit_shapes.median(step_ms),
        "compile_s": first_step_s, "capture_s": capture_s, "warmup_s": warmup_s,
        "peak_mem_allocated_bytes": torch.cuda.max_memory_allocated(dev) if cuda else None,
        "peak_mem_reserved_bytes": torch.cuda.max_memory_reserved(dev) if cuda else None,
        "loss_first": loss_first, "loss_last": loss_last,
        "parameter_count": sum(p.numel() for p in vit.parameters()),
        "versions": versions(torch),
    }


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    import torch
    if a.device == "cuda" and not torch.cuda.is_available():
        print("torch_peers.py: --device cuda: no CUDA device visible", file=sys.stderr)
        return 2
    dev = torch.device(a.device)
    size = vit_shapes.SIZES[a.model]
    if a.gemm_ceilings:
        vit_shapes.write_result(gemm_ceilings(torch, a, size, dev), a.json, "GEMM_CEILINGS")
        return 0
    r = train(torch, a, size, dev)
    vit_shapes.write_result(r, a.json, "TORCH_PEER")
    if not (r["loss_last"] == r["loss_last"]) or r["loss_last"] in (float("inf"), float("-inf")):
        print(f"torch_peers.py: non-finite loss {r['loss_last']} after the timed steps", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
