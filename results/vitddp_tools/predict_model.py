"""The parameter table of torchvision's ViTs, DDP's bucket assignment and the bytes each gradient
compression puts on the wire, for `vitddp-report predict`.

Sources:
  - the parameter list: torchvision.models.vision_transformer (VisionTransformer.named_parameters()),
    as model/param_layout.cpp builds it; the configurations are model/vit_config.cpp's.
  - buckets: mpi/buckets.cpp's assign_buckets, i.e. PyTorch DDP's _compute_bucket_assignment_by_size
    over the parameters in gradient-ready order (reverse registration order): a bucket closes once
    its fp32 bytes reach the limit (first bucket: `first_bucket_mb`, the others: the cap), a tensor is
    never split, every tensor starts at a multiple of 4 elements, the last bucket takes the rest.
  - PowerSGD: torch/distributed/algorithms/ddp_comm_hooks/powerSGD_hook.py (mpi/powersgd.cpp): a tensor
    viewed as (n, m) = (shape[0], numel / shape[0]) with r = min(n, m, rank) is compressed iff
    (n + m) r x min_compression_rate < n m; its P (n r) and Q (m r) fp32 factors are all-reduced,
    the uncompressed tensors in fp32, concatenated.
"""
from dataclasses import dataclass

from .reader import ResultsError

MIB = 1024 * 1024

# name -> (image size, patch, layers, heads, hidden, mlp, classes): model/vit_config.cpp's variants.
VIT_CONFIGS = {
    "vit_l_32": (224, 32, 24, 16, 1024, 4096, 1000),
    "vit_b_32": (224, 32, 12, 12, 768, 3072, 1000),
    "vit_l_16": (224, 16, 24, 16, 1024, 4096, 1000),
    "vit_b_16": (224, 16, 12, 12, 768, 3072, 1000),
    "vit_h_14": (224, 14, 32, 16, 1280, 5120, 1000),
    "vit_tiny": (32, 8, 4, 4, 64, 128, 10),
    "vit_micro": (8, 4, 2, 2, 8, 16, 5),
    "vit_fmnist": (28, 4, 6, 3, 192, 384, 10),
    "vit_fmnist_cpu": (28, 7, 2, 2, 32, 64, 10),
}
CHANNELS = 3


@dataclass(frozen=True)
class Param:
    """One parameter tensor: torchvision name, shape (tuple of int) and numel (elements)."""
    name: str
    shape: tuple
    numel: int


def vit_parameters(model, num_classes=None):
    """The parameters of torchvision's `model` (a key of VIT_CONFIGS) in registration order
    (model.named_parameters()), list of Param; `num_classes` replaces the head's width when given.
    ResultsError for an unknown model."""
    if model not in VIT_CONFIGS:
        raise ResultsError("unknown model '%s' (one of %s)" % (model, ", ".join(VIT_CONFIGS)))
    image, patch, layers, _, d, m, k = VIT_CONFIGS[model]
    k = num_classes or k
    t = (image // patch) ** 2 + 1
    out = []

    def add(name, *shape):
        n = 1
        for s in shape:
            n *= s
        out.append(Param(name, tuple(shape), n))
    add("class_token", 1, 1, d)
    add("conv_proj.weight", d, CHANNELS, patch, patch)
    add("conv_proj.bias", d)
    add("encoder.pos_embedding", 1, t, d)
    for i in range(layers):
        b = "encoder.layers.encoder_layer_%d." % i
        add(b + "ln_1.weight", d)
        add(b + "ln_1.bias", d)
        add(b + "self_attention.in_proj_weight", 3 * d, d)
        add(b + "self_attention.in_proj_bias", 3 * d)
        add(b + "self_attention.out_proj.weight", d, d)
        add(b + "self_attention.out_proj.bias", d)
        add(b + "ln_2.weight", d)
        add(b + "ln_2.bias", d)
        add(b + "mlp.0.weight", m, d)
        add(b + "mlp.0.bias", m)
        add(b + "mlp.3.weight", d, m)
        add(b + "mlp.3.bias", d)
    add("encoder.ln.weight", d)
    add("encoder.ln.bias", d)
    add("heads.head.weight", k, d)
    add("heads.head.bias", k)
    return out


def ready_order(params):
    """The parameters in gradient-ready order (reverse registration order, as DDP after its
    first-iteration rebuild and model/param_layout.cpp's ready_order): list of Param."""
    return list(reversed(params))


def padded(numel):
    """Elements a tensor takes in the flat buffer: numel rounded up to a multiple of 4."""
    return (numel + 3) // 4 * 4


@dataclass
class Bucket:
    """One gradient bucket: `params` (list of Param, gradient-ready order), `numel` (elements of the
    flat buffer it covers, padding included), `end_elem` (its end in the flat buffer, elements)."""
    params: list
    numel: int
    end_elem: int

    @property
    def nbytes(self):
        """fp32 bytes as all-reduced (buckets/bytes)."""
        return 4 * self.numel


def assign_buckets(params, cap_mb, first_bucket_mb=1.0):
    """DDP's bucket assignment of `params` (registration order; list of Param) for a cap of
    `cap_mb` MiB and a first bucket of `first_bucket_mb` MiB: list of Bucket in launch order, exactly
    as mpi/buckets.cpp's assign_buckets (see the module doc). ResultsError for a limit <= 0."""
    if not cap_mb > 0 or not first_bucket_mb > 0:
        raise ResultsError("--bucket-cap-mb and --first-bucket-mb must be positive (MiB), got %g and %g" % (cap_mb, first_bucket_mb))
    first, cap = int(first_bucket_mb * MIB), int(cap_mb * MIB)
    out, cur, cur_bytes, offset, start = [], [], 0, 0, 0
    for p in ready_order(params):
        if not cur:
            start = offset
        cur.append(p)
        cur_bytes += 4 * p.numel
        offset += padded(p.numel)
        if cur_bytes >= (first if not out else cap):
            out.append(Bucket(cur, offset - start, offset))
            cur, cur_bytes = [], 0
    if cur:
        out.append(Bucket(cur, offset - start, offset))
    return out


def powersgd_compresses(n, m, rank, min_compression_rate):
    """PyTorch's _should_compress: True iff (n + m) r x rate < n m, r = min(n, m, rank)."""
    r = min(n, m, rank)
    return (n + m) * r * min_compression_rate < n * m


def powersgd_bucket(bucket, rank=1, min_compression_rate=2.0):
    """PowerSGD's payload of one bucket: dict uncompressed (fp32 elements all-reduced as they are),
    p, q (fp32 elements of the P and Q factors), bytes (4 x their sum, what buckets/bytes_sent
    records from the start step on), calls (all-reduce calls: the uncompressed one when there is
    any, then P, then Q) and compressed (tensors approximated)."""
    u = p = q = c = 0
    for t in bucket.params:
        n = t.shape[0]
        m = t.numel // n
        r = min(n, m, rank)
        if powersgd_compresses(n, m, rank, min_compression_rate):
            p, q, c = p + n * r, q + m * r, c + 1
        else:
            u += t.numel
    return {"uncompressed": u, "p": p, "q": q, "bytes": 4 * (u + p + q), "calls": (1 if u else 0) + 2,
            "compressed": c}


def wire_bytes(bucket, compression, powersgd_rank=1, powersgd_rate=2.0):
    """(bytes on the wire, all-reduce calls) of one bucket under `compression`: none = fp32 numel x 4
    (one call), fp16/bf16 = numel x 2 (one call), powersgd = powersgd_bucket's bytes and calls.
    ResultsError for an unknown compression."""
    if compression == "none":
        return bucket.nbytes, 1
    if compression in ("fp16", "bf16"):
        return bucket.nbytes // 2, 1
    if compression == "powersgd":
        d = powersgd_bucket(bucket, powersgd_rank, powersgd_rate)
        return d["bytes"], d["calls"]
    raise ResultsError("unknown compression '%s' (none, fp16, bf16 or powersgd)" % compression)
