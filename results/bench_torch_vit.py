#!/usr/bin/env python3
"""PyTorch reference for vitddp's precision benchmark (results/commands/bench_precision.sh).

Trains torchvision's vit_l_32 (random init, dropout 0 as torchvision's default) on one GPU with
the seed article's loop - SGD, CrossEntropyLoss, a fixed random batch kept on the GPU - in one
precision, and reports throughput and peak memory:

    python3 results/bench_torch_vit.py --precision bf16 --json torch-bf16.json

Precisions, as PyTorch users get them:
  fp32  torch.backends.cuda.matmul.allow_tf32 = False, cudnn.allow_tf32 = False (strict fp32)
  tf32  torch.backends.cuda.matmul.allow_tf32 = True,  cudnn.allow_tf32 = True
  bf16  torch.autocast("cuda", dtype=torch.bfloat16) around forward and loss (fp32 weights,
        fp32 SGD, no grad scaler: bf16 needs none)

Timing: --warmup-steps untimed steps, then --steps steps between two torch.cuda.synchronize()
calls (steps/s = steps / that wall time, as vitddp's summary/steps_per_second); CUDA events around
each timed step give the median step time on the device. TFLOP/s = 3 x forward FLOPs per image x
images/s (forward FLOPs counted as vitddp's model/vit_config.cpp does: multiply-add = 2, GEMMs,
attention products, patch embedding and head). Peak memory: torch.cuda.max_memory_allocated()
(and max_memory_reserved()) over the whole run.

Prints one line "TORCH key=value ..." and writes the same as JSON with --json. Exit 2 on bad
arguments or when no CUDA device is visible.
"""
import argparse
import json
import sys
import time


def forward_flops_per_image(model):
    """Forward FLOPs of one image (multiply-add = 2), vitddp's formula, from the model's sizes."""
    P = (model.image_size // model.patch_size) ** 2
    T = P + 1
    D = model.hidden_dim
    M = model.mlp_dim
    layers = len(model.encoder.layers)
    patch = 2.0 * P * 3 * model.patch_size * model.patch_size * D
    per_layer = 2.0 * T * D * 3 * D + 2.0 * T * T * D * 2 + 2.0 * T * D * D + 2.0 * T * D * M * 2
    head = 2.0 * D * model.num_classes
    return patch + layers * per_layer + head


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--precision", choices=["fp32", "tf32", "bf16"], required=True)
    ap.add_argument("--model", default="vit_l_32", help="torchvision ViT constructor [vit_l_32]")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--warmup-steps", type=int, default=10)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write the result to this JSON file")
    a = ap.parse_args()
    if a.batch_size < 1 or a.steps < 1 or a.warmup_steps < 0:
        ap.error("--batch-size and --steps must be >= 1, --warmup-steps >= 0")

    import torch
    import torchvision

    if not torch.cuda.is_available():
        print("bench_torch_vit.py: no CUDA device visible", file=sys.stderr)
        return 2
    tf32 = a.precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    bf16 = a.precision == "bf16"
    dev = torch.device("cuda")
    torch.manual_seed(a.seed)

    model = getattr(torchvision.models, a.model)(weights=None).to(dev)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=a.lr)
    loss_fn = torch.nn.CrossEntropyLoss()
    images = torch.randn(a.batch_size, 3, model.image_size, model.image_size, device=dev)
    labels = torch.randint(0, model.num_classes, (a.batch_size,), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            loss = loss_fn(model(images), labels)
        loss.backward()
        opt.step()
        return loss

    losses = []
    for _ in range(a.warmup_steps):
        losses.append(step())
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(a.steps)]
    t0 = time.perf_counter()
    for e0, e1 in events:
        e0.record()
        losses.append(step())
        e1.record()
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    step_ms = sorted(e0.elapsed_time(e1) for e0, e1 in events)
    n = len(step_ms)
    median_ms = step_ms[n // 2] if n % 2 else 0.5 * (step_ms[n // 2 - 1] + step_ms[n // 2])

    flops = forward_flops_per_image(model)
    steps_per_s = a.steps / wall
    images_per_s = steps_per_s * a.batch_size
    r = {
        "framework": "pytorch",
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "device": torch.cuda.get_device_name(),
        "model": a.model,
        "precision": a.precision,
        "batch_size": a.batch_size,
        "warmup_steps": a.warmup_steps,
        "steps": a.steps,
        "steps_per_s": steps_per_s,
        "images_per_s": images_per_s,
        "tflops": 3.0 * flops * images_per_s / 1e12,
        "median_step_ms": median_ms,
        "forward_gflop_per_image": flops / 1e9,
        "peak_mem_allocated_bytes": torch.cuda.max_memory_allocated(),
        "peak_mem_reserved_bytes": torch.cuda.max_memory_reserved(),
        "loss_first": float(losses[0]),
        "loss_last": float(losses[-1]),
    }
    print("TORCH " + " ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
