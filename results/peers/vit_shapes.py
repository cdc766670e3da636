"""ViT sizes, FLOP counts and result-file helpers shared by the peer benchmarks (torch_peers.py,
jax_vit.py) and their table (peers_table.py). Pure Python: no torch, no jax, no numpy.

Sizes are torchvision's (torchvision.models.vision_transformer: vit_b_32, vit_b_16, vit_l_32,
vit_l_16, vit_h_14, 224x224 RGB images, 1000 classes) and the same as vitddp's
model/vit_config.cpp; `tiny` is a small test size for CPU runs (32x32 images, patch 8, 2 blocks of
width 64, 2 heads, MLP 128, 10 classes) and `vit_tiny` vitddp's test size of that name (the same
with 4 blocks and 4 heads), so that a CPU dry run of bench_peers.sh runs vitddp and the peers.
"""
import json
import os
import platform
from dataclasses import dataclass


@dataclass(frozen=True)
class ViTSize:
    """Arguments of torchvision's VisionTransformer (image_size, patch_size, num_layers, num_heads,
    hidden_dim, mlp_dim, num_classes); 3 input channels."""
    name: str
    image_size: int
    patch_size: int
    layers: int
    heads: int
    hidden: int
    mlp_dim: int
    num_classes: int
    channels: int = 3

    @property
    def num_patches(self):
        return (self.image_size // self.patch_size) ** 2

    @property
    def seq_len(self):
        """Tokens the encoder sees: the patches and the class token."""
        return self.num_patches + 1

    @property
    def patch_dim(self):
        return self.channels * self.patch_size * self.patch_size


SIZES = {s.name: s for s in [
    ViTSize("vit_b_32", 224, 32, 12, 12, 768, 3072, 1000),
    ViTSize("vit_b_16", 224, 16, 12, 12, 768, 3072, 1000),
    ViTSize("vit_l_32", 224, 32, 24, 16, 1024, 4096, 1000),
    ViTSize("vit_l_16", 224, 16, 24, 16, 1024, 4096, 1000),
    ViTSize("vit_h_14", 224, 14, 32, 16, 1280, 5120, 1000),
    ViTSize("tiny", 32, 8, 2, 2, 64, 128, 10),
    ViTSize("vit_tiny", 32, 8, 4, 4, 64, 128, 10),
]}

MODEL_NAMES = list(SIZES)
PRECISIONS = ("bf16", "tf32", "fp32")


def add_step_arguments(ap):
    """The options every peer takes (argparse): the model, batch, precision and the timed run."""
    ap.add_argument("--model", default="vit_l_32", choices=MODEL_NAMES)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--precision", default="bf16", choices=PRECISIONS)


def add_run_arguments(ap):
    """The timing, SGD and output options every peer takes (argparse)."""
    ap.add_argument("--warmup-steps", type=int, default=10)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--json", help="also write the result to this JSON file")


def check_run_arguments(ap, a):
    """ap.error (exit 2, one line) for a batch, step count or learning rate out of range."""
    if a.batch_size < 1:
        ap.error("--batch-size must be >= 1")
    if a.steps < 1 or a.warmup_steps < 0:
        ap.error("--steps must be >= 1 and --warmup-steps >= 0")
    if not a.lr > 0:
        ap.error("--lr must be > 0")


def forward_flops_per_image(s):
    """Forward FLOPs of one image (multiply-add = 2 FLOPs), exactly vitddp's
    forward_flops_per_image (model/vit_config.cpp), which vitddp's summary/tflops_per_rank uses:
      patch embedding  2 P (3 p^2) D
      per block        2 T D 3D (QKV) + 2 T T D (scores) + 2 T T D (weighted values)
                       + 2 T D D (out-projection) + 2 T D M x 2 (MLP up and down)
      head             2 D C
    with P patches, T = P + 1 tokens, width D, MLP width M, C classes. LayerNorm, softmax, GELU,
    bias and residual work are not counted. A training step counts as 3 x forward."""
    T, D, M, P = s.seq_len, s.hidden, s.mlp_dim, s.num_patches
    patch = 2.0 * P * s.patch_dim * D
    per_layer = 2.0 * T * D * 3 * D + 2.0 * T * T * D + 2.0 * T * T * D + 2.0 * T * D * D + 2.0 * T * D * M * 2
    head = 2.0 * D * s.num_classes
    return patch + s.layers * per_layer + head


def train_tflops(s, images_per_s):
    """TFLOP/s of training at `images_per_s`: 3 x forward FLOPs per image x images/s / 1e12
    (vitddp's tflops_per_rank)."""
    return 3.0 * forward_flops_per_image(s) * images_per_s / 1e12


def linear_shapes(s, batch_size):
    """The four linear layers of one encoder block as GEMMs (name, M, K, N): M = batch x tokens
    rows, K inputs, N outputs: QKV (D -> 3D), out-projection (D -> D), MLP up (D -> M), MLP down
    (M -> D)."""
    rows = batch_size * s.seq_len
    D, M = s.hidden, s.mlp_dim
    return [("qkv", rows, D, 3 * D), ("out_proj", rows, D, D), ("mlp_up", rows, D, M), ("mlp_down", rows, M, D)]


def training_gemms(m, k, n):
    """The three GEMMs a linear layer y = x W^T (x [m, k], W [n, k]) costs in a training step,
    as (pass, rows, inner, cols) of a product [rows, inner] x [inner, cols]:
    forward y = x W^T, data gradient dx = dy W, weight gradient dW = dy^T x."""
    return [("fwd", m, k, n), ("dgrad", m, n, k), ("wgrad", n, m, k)]


def weighted_ceiling(flops_and_tflops):
    """FLOP-weighted throughput of a set of GEMMs run one after another: sum of FLOPs / sum of
    times, each time = FLOPs / (TFLOP/s x 1e12); i.e. the FLOP-weighted harmonic mean of the
    TFLOP/s. Input: iterable of (flops, tflops) with tflops > 0. Returns TFLOP/s."""
    pairs = list(flops_and_tflops)
    if not pairs or any(t <= 0 for _, t in pairs):
        raise ValueError("weighted_ceiling needs at least one (flops, tflops) pair with tflops > 0")
    return sum(f for f, _ in pairs) / sum(f / t for f, t in pairs)


def base_versions():
    """Python and host, for every result's `versions`."""
    return {"python": platform.python_version(), "host": platform.node()}


def write_result(result, json_path, tag):
    """Prints `result` (a dict of JSON values) as one line "TAG {json}" on stdout and, when
    `json_path` is set, writes the same object to that file (parent folders must exist)."""
    line = json.dumps(result, sort_keys=True)
    print(f"{tag} {line}", flush=True)
    if json_path:
        tmp = json_path + ".tmp"
        with open(tmp, "w") as f:
            f.write(line + "\n")
        os.replace(tmp, json_path)


def median(values):
    """Median of a non-empty list of numbers (mean of the middle two for an even count)."""
    v = sorted(values)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])
