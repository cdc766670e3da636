#!/usr/bin/env python3
"""JAX peer of vitddp's training step: a plain jax.numpy Vision Transformer, one process per
(model, batch, precision, attention) run.

    python3 results/peers/jax_vit.py --model vit_l_32 --batch-size 32 --precision bf16 --json jax.json
    python3 results/peers/jax_vit.py --model tiny --device cpu --check-against-torch

The model is torchvision's VisionTransformer (torchvision.models.vision_transformer), written out:
  patch embedding  the conv_proj (kernel = stride = patch) as a reshape of the NCHW image into
                   [B, P, 3 p p] patches (channel, row, column order: conv_proj.weight flattened)
                   and a matmul with a bias;
  tokens           class token prepended, learned position embedding added (dropout 0);
  blocks           pre-LN: x + MHA(LN1(x)), then + MLP(LN2(x)); LayerNorm eps 1e-6; attention with
                   packed QKV (in_proj [D, 3D], q, k, v in that order), heads of D/heads,
                   softmax(q k^T / sqrt(head_dim)) v by jax.nn.dot_product_attention, out-projection;
                   MLP D -> mlp_dim -> D with exact (erf) GELU;
  head             final LayerNorm over all tokens, the class token's row, linear to the classes.
Loss: mean cross-entropy (computed in fp32). Step: jax.value_and_grad, SGD p <- p - lr g (lr 1e-3,
no momentum) on fp32 parameters, all under one jax.jit with the parameters donated.

Precisions (what PyTorch's peers run):
  bf16  parameters fp32; every matmul casts its inputs to bf16 and accumulates in fp32
        (preferred_element_type=float32), its result rounded to bf16 and the bias added in bf16 -
        torch.autocast(bfloat16)'s linear; LayerNorm and the loss in fp32; the residual stream
        fp32 (fp32 + bf16 promotes, as in PyTorch); GELU and attention on the bf16 values.
  tf32  fp32 everywhere, jax_default_matmul_precision = "tensorfloat32".
  fp32  fp32 everywhere, jax_default_matmul_precision = "float32" (no TF32: XLA's GPU default
        would use it); with --fp32-matmul tf32x3, "TF32_TF32_F32_X3" (jax.lax.DotAlgorithmPreset:
        three TF32 passes on split operands, the algorithm of vitddp's --fp32-matmul tf32x3; XLA
        applies it to every dot, the attention's too, where vitddp keeps its attention strict fp32).
--attention: cudnn (jax.nn.dot_product_attention(implementation="cudnn"): bf16 on a GPU only),
xla (implementation="xla"), or auto [default]: cudnn where it applies (GPU and bf16) and compiles,
else xla; the result's `attention` says which ran, `attention_fallback` why cudnn was not used.

Timing: the step is compiled ahead of time (compile_s = jit(...).lower(...).compile() wall time),
--warmup-steps untimed steps, then --steps steps dispatched back to back and waited for with
jax.block_until_ready: steps_per_s = steps / that wall time (vitddp's summary/steps_per_second
definition). median_step_ms: a second pass of min(--steps, 50) steps each waited for alone.
images_per_s, tflops as torch_peers.py (vitddp's FLOP formula). Peak memory: the device's
memory_stats() peak_bytes_in_use (and bytes_reserved or bytes_limit of XLA's pool).

--check-against-torch: builds torchvision's model of the same size (fp32, on the CPU; the head,
which torchvision initializes to zeros, drawn from N(0, 0.02^2) so that every gradient is non-zero),
copies its weights into the JAX parameters, and compares on one random batch the loss, the global
gradient norm (relative difference <= 1e-4 both), every parameter's gradient (max |difference| <=
1e-3 x max |torch gradient| of that tensor) and the loss after one SGD step of each (<= 1e-4).
Exit 1 when any comparison fails. Needs --precision fp32.

Output: one line "JAX_PEER {json}" (or "JAX_CHECK {json}") on stdout, the same JSON in --json.
Exit 2 on bad arguments (one line naming the option) or when --device cuda finds no GPU.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vit_shapes  # noqa: E402

LN_EPS = 1e-6  # torchvision: partial(nn.LayerNorm, eps=1e-6)


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    vit_shapes.add_step_arguments(ap)
    ap.add_argument("--attention", default="auto", choices=["auto", "cudnn", "xla"])
    ap.add_argument("--fp32-matmul", default="ieee", choices=["ieee", "tf32x3"],
                    help="--precision fp32: float32 matmuls (ieee) or the TF32_TF32_F32_X3 dot algorithm (tf32x3)")
    vit_shapes.add_run_arguments(ap)
    ap.add_argument("--check-against-torch", action="store_true",
                    help="compare loss and gradients with torchvision's model on the same weights, then exit")
    a = ap.parse_args(argv)
    vit_shapes.check_run_arguments(ap, a)
    if a.fp32_matmul != "ieee" and (a.precision != "fp32" or a.device != "cuda"):
        ap.error("--fp32-matmul tf32x3 needs --precision fp32 and --device cuda (a TF32 algorithm)")
    if a.check_against_torch and a.precision != "fp32":
        ap.error("--check-against-torch compares in fp32: give --precision fp32")
    if a.attention == "cudnn" and (a.device != "cuda" or a.precision != "bf16"):
        ap.error("--attention cudnn needs --device cuda and --precision bf16 (cuDNN attention is fp16/bf16 only)")
    return a


# ----------------------------------------------------------------------------------------------
# Model. Parameters: a dict of fp32 arrays, matrices stored [in, out] (torch's Linear weight
# transposed):
#   patch_w [3 p p, D], patch_b [D], cls [D], pos [T, D],
#   layers: list of dicts ln1_w, ln1_b [D], qkv_w [D, 3D], qkv_b [3D], out_w [D, D], out_b [D],
#           ln2_w, ln2_b [D], up_w [D, M], up_b [M], down_w [M, D], down_b [D],
#   ln_w, ln_b [D], head_w [D, C], head_b [C].
# ----------------------------------------------------------------------------------------------

def init_params(jax, size, seed):
    """Random parameters for the benchmark (values do not change the speed): weights N(0, 0.02^2),
    biases 0, LayerNorm scales 1, offsets 0, class token 0, and the head 0 as torchvision
    initializes it (so the first loss is ln(classes), as the PyTorch peers')."""
    jnp = jax.numpy
    keys = iter(jax.random.split(jax.random.key(seed), 4 + 4 * size.layers))
    D, M, T = size.hidden, size.mlp_dim, size.seq_len

    def w(*shape):
        return 0.02 * jax.random.normal(next(keys), shape, jnp.float32)

    def z(n):
        return jnp.zeros((n,), jnp.float32)

    def o(n):
        return jnp.ones((n,), jnp.float32)

    layers = [dict(ln1_w=o(D), ln1_b=z(D), qkv_w=w(D, 3 * D), qkv_b=z(3 * D), out_w=w(D, D), out_b=z(D),
                   ln2_w=o(D), ln2_b=z(D), up_w=w(D, M), up_b=z(M), down_w=w(M, D), down_b=z(D))
              for _ in range(size.layers)]
    return dict(patch_w=w(size.patch_dim, D), patch_b=z(D), cls=z(D), pos=w(T, D), layers=layers,
                ln_w=o(D), ln_b=z(D), head_w=jnp.zeros((D, size.num_classes), jnp.float32), head_b=z(size.num_classes))


def params_from_torch(named, size):
    """Maps torchvision VisionTransformer tensors (a dict name -> numpy array, from
    named_parameters() or their .grad) to this file's parameter dict (numpy arrays)."""
    def t(name):
        return named[name].T.copy()

    out = dict(patch_w=named["conv_proj.weight"].reshape(size.hidden, -1).T.copy(), patch_b=named["conv_proj.bias"],
               cls=named["class_token"].reshape(-1), pos=named["encoder.pos_embedding"].reshape(size.seq_len, size.hidden),
               ln_w=named["encoder.ln.weight"], ln_b=named["encoder.ln.bias"],
               head_w=t("heads.head.weight"), head_b=named["heads.head.bias"], layers=[])
    for i in range(size.layers):
        p = f"encoder.layers.encoder_layer_{i}."
        out["layers"].append(dict(
            ln1_w=named[p + "ln_1.weight"], ln1_b=named[p + "ln_1.bias"],
            qkv_w=t(p + "self_attention.in_proj_weight"), qkv_b=named[p + "self_attention.in_proj_bias"],
            out_w=t(p + "self_attention.out_proj.weight"), out_b=named[p + "self_attention.out_proj.bias"],
            ln2_w=named[p + "ln_2.weight"], ln2_b=named[p + "ln_2.bias"],
            up_w=t(p + "mlp.0.weight"), up_b=named[p + "mlp.0.bias"],
            down_w=t(p + "mlp.3.weight"), down_b=named[p + "mlp.3.bias"]))
    return out


def make_loss_fn(jax, size, compute_dtype, attention):
    """loss(params, images [B,3,H,W] fp32, labels [B] int32) -> mean cross-entropy (fp32 scalar).
    compute_dtype: jnp.bfloat16 (autocast-like) or jnp.float32; attention: "cudnn" or "xla"."""
    jnp = jax.numpy
    f32 = jnp.float32
    D, H, N = size.hidden, size.hidden // size.heads, size.heads

    def dense(x, w, b):
        y = jnp.matmul(x.astype(compute_dtype), w.astype(compute_dtype), preferred_element_type=f32)
        return y.astype(compute_dtype) + b.astype(compute_dtype)

    def layer_norm(x, w, b):
        x = x.astype(f32)
        mean = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
        return (x - mean) * jax.lax.rsqrt(var + LN_EPS) * w + b

    def block(x, p):
        B, T, _ = x.shape
        h = layer_norm(x, p["ln1_w"], p["ln1_b"])
        qkv = dense(h, p["qkv_w"], p["qkv_b"]).reshape(B, T, 3, N, H)
        att = jax.nn.dot_product_attention(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], implementation=attention)
        x = x + dense(att.reshape(B, T, D), p["out_w"], p["out_b"])
        h = layer_norm(x, p["ln2_w"], p["ln2_b"])
        h = jax.nn.gelu(dense(h, p["up_w"], p["up_b"]), approximate=False)
        return x + dense(h, p["down_w"], p["down_b"])

    def loss_fn(params, images, labels):
        B = images.shape[0]
        g, ps = size.image_size // size.patch_size, size.patch_size
        patches = images.reshape(B, size.channels, g, ps, g, ps).transpose(0, 2, 4, 1, 3, 5)
        x = dense(patches.reshape(B, g * g, size.patch_dim), params["patch_w"], params["patch_b"])
        cls = jnp.broadcast_to(params["cls"].astype(f32), (B, 1, D))
        x = jnp.concatenate([cls, x.astype(f32)], axis=1) + params["pos"]
        for p in params["layers"]:
            x = block(x, p)
        x = layer_norm(x, params["ln_w"], params["ln_b"])[:, 0]
        logits = dense(x, params["head_w"], params["head_b"]).astype(f32)
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=-1))

    return loss_fn


def make_train_step(jax, loss_fn, lr):
    """(params, images, labels) -> (params after one SGD step, loss before it)."""
    def train_step(params, images, labels):
        loss, grads = jax.value_and_grad(loss_fn)(params, images, labels)
        return jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads), loss
    return train_step


# ----------------------------------------------------------------------------------------------

def import_jax(device, precision, fp32_matmul="ieee"):
    """Imports jax for `device` (cpu: JAX_PLATFORMS=cpu before the import) with the matmul
    precision of `precision` (and of --fp32-matmul in fp32). Returns (jax, the jax.Device)."""
    if device == "cpu":
        os.environ["JAX_PLATFORMS"] = "cpu"
    import jax
    if precision != "bf16":  # bf16's matmuls take bf16 operands: no fp32 precision to choose
        jax.config.update("jax_default_matmul_precision",
                          "tensorfloat32" if precision == "tf32"
                          else "TF32_TF32_F32_X3" if fp32_matmul == "tf32x3" else "float32")
    if device == "cpu":
        return jax, jax.devices("cpu")[0]
    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        gpus = []
    return jax, (gpus[0] if gpus else None)


def versions(jax, dev):
    v = vit_shapes.base_versions()
    import jaxlib
    v.update(jax=jax.__version__, jaxlib=jaxlib.__version__)
    try:
        v["backend"] = dev.client.platform_version
    except AttributeError:
        pass
    return v


def compile_step(jax, a, size, dev, params, images, labels):
    """AOT-compiles the donated train step with the attention implementation chosen by
    --attention. Returns (compiled, attention that ran, fallback reason or None, compile_s)."""
    jnp = jax.numpy
    cd = jnp.bfloat16 if a.precision == "bf16" else jnp.float32
    wants_cudnn = a.attention == "cudnn" or (a.attention == "auto" and dev.platform == "gpu" and a.precision == "bf16")
    candidates = ["cudnn", "xla"] if wants_cudnn and a.attention == "auto" else (["cudnn"] if wants_cudnn else ["xla"])
    fallback = None if wants_cudnn or a.attention == "xla" else f"cuDNN attention needs a GPU and bf16 ({dev.platform}, {a.precision})"
    for impl in candidates:
        step = jax.jit(make_train_step(jax, make_loss_fn(jax, size, cd, impl), a.lr), donate_argnums=0)
        t0 = time.perf_counter()
        try:
            compiled = step.lower(params, images, labels).compile()
        except Exception as e:  # noqa: BLE001 - cuDNN refusing a shape shows up as various errors
            if impl == "cudnn" and a.attention == "auto":
                fallback = f"cudnn: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
                continue
            raise
        return compiled, impl, fallback, time.perf_counter() - t0
    raise AssertionError("unreachable")


def benchmark(jax, a, size, dev):
    jnp = jax.numpy
    params = jax.device_put(init_params(jax, size, a.seed), dev)
    k1, k2 = jax.random.split(jax.random.key(a.seed + 1))
    images = jax.device_put(jax.random.normal(k1, (a.batch_size, 3, size.image_size, size.image_size), jnp.float32), dev)
    labels = jax.device_put(jax.random.randint(k2, (a.batch_size,), 0, size.num_classes, jnp.int32), dev)
    compiled, impl, fallback, compile_s = compile_step(jax, a, size, dev, params, images, labels)

    t_warm = time.perf_counter()
    loss_first = None
    for i in range(a.warmup_steps):
        params, loss = compiled(params, images, labels)
        if i == 0:
            loss_first = float(loss)
    jax.block_until_ready(params)
    warmup_s = time.perf_counter() - t_warm

    t0 = time.perf_counter()
    for _ in range(a.steps):
        params, loss = compiled(params, images, labels)
    jax.block_until_ready((params, loss))
    wall = time.perf_counter() - t0
    loss_last = float(loss)

    step_ms = []
    for _ in range(min(a.steps, 50)):
        ts = time.perf_counter()
        params, loss = compiled(params, images, labels)
        jax.block_until_ready((params, loss))
        step_ms.append((time.perf_counter() - ts) * 1e3)

    stats = dev.memory_stats() or {}
    steps_per_s = a.steps / wall
    images_per_s = steps_per_s * a.batch_size
    return {
        "kind": "peer", "tool": "jax", "mode": "jit", "attention": impl, "attention_fallback": fallback,
        "model": size.name, "batch_size": a.batch_size, "precision": a.precision, "fp32_matmul": a.fp32_matmul,
        "lr": a.lr, "seed": a.seed,
        "device": dev.platform, "device_name": dev.device_kind,
        "warmup_steps": a.warmup_steps, "steps": a.steps, "timed_window_s": wall,
        "steps_per_s": steps_per_s, "images_per_s": images_per_s,
        "tflops": vit_shapes.train_tflops(size, images_per_s),
        "forward_flops_per_image": vit_shapes.forward_flops_per_image(size),
        "median_step_ms": vit_shapes.median(step_ms),
        "compile_s": compile_s, "warmup_s": warmup_s,
        "peak_mem_allocated_bytes": stats.get("peak_bytes_in_use"),
        "peak_mem_reserved_bytes": stats.get("bytes_reserved", stats.get("bytes_limit")),
        "loss_first": loss_first, "loss_last": loss_last,
        "parameter_count": sum(int(x.size) for x in jax.tree_util.tree_leaves(params)),
        "versions": versions(jax, dev),
    }


def check_against_torch(jax, a, size, dev):
    """--check-against-torch (see the module doc). Returns (result dict, all comparisons passed)."""
    import numpy as np
    import torch
    import torch_peers  # the same torchvision model the PyTorch peers train

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(a.seed)
    vit = torch_peers.build_vit(size)
    vit.train()
    with torch.no_grad():
        vit.heads.head.weight.normal_(0.0, 0.02)
    images = torch.randn(a.batch_size, 3, size.image_size, size.image_size)
    labels = torch.randint(0, size.num_classes, (a.batch_size,))
    named = {n: p.detach().numpy().copy() for n, p in vit.named_parameters()}
    loss_t = torch.nn.functional.cross_entropy(vit(images), labels)
    loss_t.backward()
    grads_t = {n: p.grad.numpy().copy() for n, p in vit.named_parameters()}
    opt = torch.optim.SGD(vit.parameters(), lr=a.lr)
    opt.step()
    with torch.no_grad():
        loss_t2 = float(torch.nn.functional.cross_entropy(vit(images), labels))

    jnp = jax.numpy
    loss_fn = make_loss_fn(jax, size, jnp.float32, "xla")
    params = jax.device_put(jax.tree_util.tree_map(jnp.asarray, params_from_torch(named, size)), dev)
    x = jax.device_put(jnp.asarray(images.numpy()), dev)
    y = jax.device_put(jnp.asarray(labels.numpy().astype(np.int32)), dev)
    loss_j, grads_j = jax.jit(jax.value_and_grad(loss_fn))(params, x, y)
    new_params, _ = jax.jit(make_train_step(jax, loss_fn, a.lr))(params, x, y)
    loss_j2 = float(jax.jit(loss_fn)(new_params, x, y))

    ref = params_from_torch(grads_t, size)
    leaves_t = jax.tree_util.tree_leaves(ref)
    leaves_j = [np.asarray(g) for g in jax.tree_util.tree_leaves(grads_j)]
    norm_t = float(np.sqrt(sum(np.sum(np.square(g.astype(np.float64))) for g in leaves_t)))
    norm_j = float(np.sqrt(sum(np.sum(np.square(g.astype(np.float64))) for g in leaves_j)))
    worst = max(float(np.max(np.abs(gj - gt)) / max(float(np.max(np.abs(gt))), 1e-30))
                for gj, gt in zip(leaves_j, leaves_t))
    loss_j, loss_t = float(loss_j), float(loss_t.detach())
    r = {"kind": "check", "model": size.name, "batch_size": a.batch_size, "device": dev.platform,
         "loss_torch": loss_t, "loss_jax": loss_j, "loss_rel_diff": abs(loss_j - loss_t) / abs(loss_t),
         "grad_norm_torch": norm_t, "grad_norm_jax": norm_j, "grad_norm_rel_diff": abs(norm_j - norm_t) / norm_t,
         "grad_worst_tensor_rel_diff": worst, "zero_grad_tensors": sum(1 for g in leaves_t if not np.any(g)),
         "loss_after_sgd_torch": loss_t2, "loss_after_sgd_jax": loss_j2,
         "loss_after_sgd_rel_diff": abs(loss_j2 - loss_t2) / abs(loss_t2)}
    ok = (r["loss_rel_diff"] <= 1e-4 and r["grad_norm_rel_diff"] <= 1e-4 and worst <= 1e-3
          and r["loss_after_sgd_rel_diff"] <= 1e-4 and r["zero_grad_tensors"] == 0)
    r["passed"] = ok
    return r, ok


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    jax, dev = import_jax(a.device, a.precision, a.fp32_matmul)
    if dev is None:
        print("jax_vit.py: --device cuda: JAX sees no GPU", file=sys.stderr)
        return 2
    size = vit_shapes.SIZES[a.model]
    if a.check_against_torch:
        r, ok = check_against_torch(jax, a, size, dev)
        vit_shapes.write_result(r, a.json, "JAX_CHECK")
        if not ok:
            print("jax_vit.py: the JAX model disagrees with torchvision's (see JAX_CHECK)", file=sys.stderr)
        return 0 if ok else 1
    r = benchmark(jax, a, size, dev)
    vit_shapes.write_result(r, a.json, "JAX_PEER")
    if not (r["loss_last"] == r["loss_last"]) or abs(r["loss_last"]) == float("inf"):
        print(f"jax_vit.py: non-finite loss {r['loss_last']} after the timed steps", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
