#!/usr/bin/env python3
"""PyTorch twin of vitddp: torchvision's ViT trained by torch itself, in strict fp32, written to
HDF5 for the parity tests (tests/gpu/test_torch_parity.cpp; tests/cpu/test_torch_twin_cpu.cpp
with the committed tests/data/twin_vit_micro.h5). Needs torch, torchvision, h5py.

Generate a reference ("twin") file:

    python3 tests/reference/torch_twin.py --model vit_b_32 --batch 4 --seed 0 --random-head \\
        --out twin_vit_b_32.h5

  --model: torchvision's vit_b_32, vit_l_32, vit_b_16, vit_l_16, vit_h_14, or vitddp's test
  sizes vit_tiny, vit_micro as torchvision VisionTransformer(...). torch.manual_seed(seed),
  torchvision's default initialisation (the head is zero there, which would leave every other
  gradient zero; --random-head re-draws it with nn.Linear's default init from the same
  generator), a batch of standard-normal images and uniform labels from torch.Generator seeded
  with seed + 1 (on the CPU, so any device gives the same batch), then one forward/backward and
  3 steps of torch.optim.SGD (single-tensor implementation,
  foreach=False) on that same batch. The file holds, all float32 unless noted:
    /params/<name>                 every parameter before training, torchvision shape
    /input/images [B, 3, S, S] (S = 224; 32, 8 for the test sizes), /input/labels int32 [B]
    /logits [B, K], /loss (scalar) of the first forward (mean cross-entropy)
    /grads/<name>                  gradients of that first backward
    /params_after_3_steps/<name>   parameters after the 3 SGD steps
    root attributes: model, seed, batch, num_classes, random_head, lr, momentum, weight_decay,
    steps (3), torch_version, torchvision_version, device, fp32 (how TF32 was turned off),
    sdpa_backend.

Forward with a weights file written by vitddp (src/io/weights_io.h, /params/<name>):

    python3 tests/reference/torch_twin.py --load vitddp_vit_b_32.h5 --input twin_vit_b_32.h5 \\
        --out torch_load_vit_b_32.h5

  builds torchvision's model for the file's "model" attribute, load_state_dict(strict=True) from
  /params, runs the forward on --input's /input batch and writes /input/images, /input/labels,
  /logits, /loss and the attributes model, torch_version, weights, input.

Strict fp32: TF32 off for cuBLAS and cuDNN (torch >= 2.9: torch.backends.*.fp32_precision =
"ieee"; older: allow_tf32 = False; the two APIs must not be mixed), checked by a GEMM and a
convolution against float64; attention through SDPA's math backend (the fused kernels are
another algorithm); the model stays in train mode (dropout is 0 in torchvision's ViT), so
nn.MultiheadAttention never takes its inference fast path. Files are written to OUT.tmp and
renamed, so an interrupted run leaves no partial OUT.
"""
import argparse
import os

import h5py
import numpy as np
import torch
import torch.nn.functional as F
import torchvision
from torch.nn.attention import SDPBackend, sdpa_kernel

TORCHVISION_MODELS = ("vit_b_32", "vit_l_32", "vit_b_16", "vit_l_16", "vit_h_14")
# vitddp's test sizes (model/vit_config.cpp) as torchvision VisionTransformer arguments:
# image_size, patch_size, num_layers, num_heads, hidden_dim, mlp_dim, and the class count.
TEST_SIZES = {"vit_tiny": ((32, 8, 4, 4, 64, 128), 10), "vit_micro": ((8, 4, 2, 2, 8, 16), 5)}
MODELS = TORCHVISION_MODELS + tuple(TEST_SIZES)


def strict_fp32(device):
    """Turns TF32 off for matmul and convolution, verifies it, and says how (for the file)."""
    if hasattr(torch.backends, "fp32_precision"):
        cudnn = torch.backends.cudnn
        scopes = {"torch.backends": torch.backends, "torch.backends.cuda.matmul": torch.backends.cuda.matmul,
                  "torch.backends.cudnn": cudnn, "torch.backends.cudnn.conv": getattr(cudnn, "conv", None),
                  "torch.backends.cudnn.rnn": getattr(cudnn, "rnn", None)}
        done = [name for name, scope in scopes.items() if hasattr(scope, "fp32_precision")]
        for name in done:
            scopes[name].fp32_precision = "ieee"
        how = ", ".join(f"{name}.fp32_precision = 'ieee'" for name in done)
    else:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        how = "torch.backends.cuda.matmul.allow_tf32 = False, torch.backends.cudnn.allow_tf32 = False"
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(256, 1024, generator=g), torch.randn(1024, 256, generator=g)
    x, w = torch.randn(2, 3, 64, 64, generator=g), torch.randn(64, 3, 32, 32, generator=g)
    checks = {
        "matmul": ((a.to(device) @ b.to(device)).cpu().double(), a.double() @ b.double()),
        "conv2d": (F.conv2d(x.to(device), w.to(device), stride=32).cpu().double(),
                   F.conv2d(x.double(), w.double(), stride=32)),
    }
    for name, (got, want) in checks.items():
        err = ((got - want).norm() / want.norm()).item()
        # fp32 gives ~1e-7; TF32 (10-bit mantissa) ~1e-4.
        assert err < 1e-5, f"{name} on {device} is not strict fp32 (norm-relative error {err:.2e} vs float64)"
    return how


def default_classes(name):
    return TEST_SIZES[name][1] if name in TEST_SIZES else 1000


def build_model(name, num_classes, seed=None, random_head=False):
    if name not in MODELS:
        raise SystemExit(f"unknown model '{name}' (one of {', '.join(MODELS)})")
    if seed is not None:
        torch.manual_seed(seed)
    if name in TEST_SIZES:
        model = torchvision.models.VisionTransformer(*TEST_SIZES[name][0], num_classes=num_classes)
    else:
        model = getattr(torchvision.models, name)(weights=None, num_classes=num_classes)
    if random_head:
        model.heads.head.reset_parameters()  # nn.Linear's default init, drawn from the same generator
    return model


def tensors(model, what):
    """{torchvision name: float32 numpy copy} of the parameters (what='data') or their gradients."""
    return {n: (p.detach() if what == "data" else p.grad).float().cpu().numpy().copy()
            for n, p in model.named_parameters()}


def forward(model, images, labels):
    with sdpa_kernel(SDPBackend.MATH):
        logits = model(images)
    return logits, F.cross_entropy(logits, labels)


def write_h5(path, datasets, attrs):
    """Writes {dataset path: numpy array} and root attributes to path.tmp, then renames it to path."""
    tmp = path + ".tmp"
    with h5py.File(tmp, "w") as f:
        for name, value in datasets.items():
            f.create_dataset(name, data=value)
        for key, value in attrs.items():
            # str() also turns torch.__version__ (a str subclass h5py cannot store) into a str.
            f.attrs[key] = str(value) if isinstance(value, str) else value
    os.replace(tmp, path)


def attr_str(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def generate(args, device, fp32_how):
    if args.num_classes is None:
        args.num_classes = default_classes(args.model)
    model = build_model(args.model, args.num_classes, args.seed, args.random_head).to(device).train()
    g = torch.Generator().manual_seed(args.seed + 1)
    images = torch.randn(args.batch, 3, model.image_size, model.image_size, generator=g)
    labels = torch.randint(0, args.num_classes, (args.batch,), generator=g)
    out = {f"params/{n}": v for n, v in tensors(model, "data").items()}
    out["input/images"] = images.numpy()
    out["input/labels"] = labels.numpy().astype(np.int32)
    images, labels = images.to(device), labels.to(device)

    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum,
                          weight_decay=args.weight_decay, foreach=False)
    for step in range(3):
        opt.zero_grad(set_to_none=True)
        logits, loss = forward(model, images, labels)
        loss.backward()
        if step == 0:
            out["logits"] = logits.detach().float().cpu().numpy()
            out["loss"] = np.float32(loss.item())
            out.update({f"grads/{n}": v for n, v in tensors(model, "grad").items()})
        print(f"{args.model} step {step}: loss {loss.item():.9g}")
        opt.step()
    out.update({f"params_after_3_steps/{n}": v for n, v in tensors(model, "data").items()})

    write_h5(args.out, out, {
        "model": args.model, "seed": args.seed, "batch": args.batch, "num_classes": args.num_classes,
        "random_head": int(args.random_head), "lr": args.lr, "momentum": args.momentum,
        "weight_decay": args.weight_decay, "steps": 3, "optimizer": "torch.optim.SGD(foreach=False)",
        "torch_version": torch.__version__, "torchvision_version": torchvision.__version__,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "fp32": fp32_how, "sdpa_backend": "math",
    })
    print(f"wrote {args.out}: {sum(v.size for k, v in out.items() if k.startswith('params/')):,} parameters, "
          f"batch {args.batch}, loss {float(out['loss']):.9g}")


def load(args, device):
    if not args.input:
        raise SystemExit("--load needs --input TWIN_FILE (the batch to run)")
    with h5py.File(args.load, "r") as w:
        name = attr_str(w.attrs["model"])
        state = {n: torch.from_numpy(w["params"][n][()]) for n in w["params"]}
        num_classes = int(state["heads.head.bias"].shape[0])
    model = build_model(name, num_classes)
    model.load_state_dict(state, strict=True)
    model = model.to(device).train()
    with h5py.File(args.input, "r") as t:
        images = t["input/images"][()]
        labels = t["input/labels"][()].astype(np.int32)
    with torch.no_grad():
        logits, loss = forward(model, torch.from_numpy(images).to(device), torch.from_numpy(labels).long().to(device))
    write_h5(args.out, {"input/images": images, "input/labels": labels,
                        "logits": logits.float().cpu().numpy(), "loss": np.float32(loss.item())},
             {"model": name, "torch_version": torch.__version__, "weights": args.load, "input": args.input})
    print(f"wrote {args.out}: {name} forward of {args.load} on {args.input}, loss {loss.item():.9g}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="vit_b_32", choices=MODELS)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--num-classes", type=int, help="default: 1000 (vit_tiny 10, vit_micro 5, as vitddp)")
    p.add_argument("--random-head", action="store_true", help="re-draw the zero head (nn.Linear default init)")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=1e-4)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--load", metavar="WEIGHTS", help="run the forward of this vitddp weights file instead")
    p.add_argument("--input", metavar="TWIN", help="with --load: the twin file whose /input batch to use")
    p.add_argument("--out", required=True, help="HDF5 file to write (replaced if it exists)")
    args = p.parse_args()
    device = torch.device(args.device)
    fp32_how = strict_fp32(device)
    if args.load:
        load(args, device)
    else:
        generate(args, device, fp32_how)


if __name__ == "__main__":
    main()
