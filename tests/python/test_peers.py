"""Tests of results/peers/ (the PyTorch and JAX peers of vitddp's training step, their table) and
results/commands/bench_peers.sh's settings checks. The FLOP formula, GEMM-ceiling weighting, the
table and the script's checks need neither torch nor jax; the peers' own CPU runs are marked
`peers` and run only with `pytest --peers` (conftest.py), where torch, torchvision and jax are
installed (the GPU machine's Python: CTest's python_peers, label gpu)."""
import importlib.util
import json
import math
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import h5py
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PEERS = os.path.join(ROOT, "results", "peers")
sys.path.insert(0, PEERS)
import peers_table  # noqa: E402
import vit_shapes  # noqa: E402

# Forward FLOPs per image counted by hand (multiply-add = 2):
# tiny: 16 patches of 3x8x8 = 192 values, 17 tokens, width 64, MLP 128, 2 blocks, 10 classes
#   patch 2*16*192*64 = 393216; block: QKV 2*17*64*192 = 417792, scores and values 2 x 2*17*17*64
#   = 73984, out-projection 2*17*64*64 = 139264, MLP 2 x 2*17*64*128 = 557056 -> 1188096; head
#   2*64*10 = 1280; total 393216 + 2*1188096 + 1280.
TINY_FLOPS = 2770688
# vit_l_32: 49 patches of 3072, 50 tokens, width 1024, MLP 4096, 24 blocks, 1000 classes
#   patch 308281344; block 314572800 + 10240000 + 104857600 + 838860800 = 1268531200; head 2048000.
VIT_L_32_FLOPS = 308281344 + 24 * 1268531200 + 2048000


def test_forward_flops_match_hand_counts():
    assert vit_shapes.forward_flops_per_image(vit_shapes.SIZES["tiny"]) == TINY_FLOPS
    assert vit_shapes.forward_flops_per_image(vit_shapes.SIZES["vit_l_32"]) == VIT_L_32_FLOPS == 30755078144
    assert vit_shapes.train_tflops(vit_shapes.SIZES["vit_l_32"], 1000.0) == pytest.approx(3 * 30755078144 * 1000 / 1e12)


@pytest.mark.parametrize("name", ["vit_b_32", "vit_b_16", "vit_l_16", "vit_h_14", "vit_tiny"])
def test_forward_flops_equal_a_sum_over_the_gemms(name):
    """Every GEMM of the forward listed one by one, against the closed formula; and the same
    number from results/bench_torch_vit.py's formula (which reads a torchvision model's sizes)."""
    s = vit_shapes.SIZES[name]
    g, T, D = s.image_size // s.patch_size, s.seq_len, s.hidden
    gemms = [(g * g, s.channels * s.patch_size ** 2, D)]  # patch embedding (conv as a matmul)
    for _ in range(s.layers):
        gemms += [(T, D, 3 * D), (T, D, D), (T, s.mlp_dim, D), (T, D, s.mlp_dim)]
        gemms += [(T, s.hidden // s.heads, T)] * s.heads * 2  # per head: q k^T and p v
    gemms.append((1, D, s.num_classes))
    assert vit_shapes.forward_flops_per_image(s) == sum(2 * m * k * n for m, k, n in gemms)
    spec = importlib.util.spec_from_file_location("bench_torch_vit", os.path.join(ROOT, "results", "bench_torch_vit.py"))
    bench_torch_vit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench_torch_vit)
    model = SimpleNamespace(image_size=s.image_size, patch_size=s.patch_size, hidden_dim=D, mlp_dim=s.mlp_dim,
                            num_classes=s.num_classes, encoder=SimpleNamespace(layers=[None] * s.layers))
    assert bench_torch_vit.forward_flops_per_image(model) == vit_shapes.forward_flops_per_image(s)


def test_linear_shapes_and_training_gemms():
    shapes = vit_shapes.linear_shapes(vit_shapes.SIZES["vit_l_32"], 32)
    assert shapes == [("qkv", 1600, 1024, 3072), ("out_proj", 1600, 1024, 1024), ("mlp_up", 1600, 1024, 4096),
                      ("mlp_down", 1600, 4096, 1024)]
    assert vit_shapes.training_gemms(1600, 1024, 3072) == [("fwd", 1600, 1024, 3072), ("dgrad", 1600, 3072, 1024),
                                                           ("wgrad", 3072, 1600, 1024)]


def test_weighted_ceiling_is_flops_over_time():
    # 1e12 FLOPs at 100 TFLOP/s (10 ms) and 3e12 at 300 TFLOP/s (10 ms): 4e12 FLOPs in 20 ms.
    assert vit_shapes.weighted_ceiling([(1e12, 100.0), (3e12, 300.0)]) == pytest.approx(200.0)
    with pytest.raises(ValueError):
        vit_shapes.weighted_ceiling([])
    with pytest.raises(ValueError):
        vit_shapes.weighted_ceiling([(1e12, 0.0)])


def peer_json(path, tool, mode, sps, **kw):
    r = {"kind": "peer", "tool": tool, "mode": mode, "model": "vit_l_32", "batch_size": 32, "precision": "bf16",
         "steps_per_s": sps, "median_step_ms": 1000.0 / sps, "peak_mem_allocated_bytes": 3 * 1024 ** 3,
         "peak_mem_reserved_bytes": 4 * 1024 ** 3, "compile_s": 1.5, "device_name": "NVIDIA H200",
         "loss_first": math.log(1000), "loss_last": 6.5}
    r.update(kw)
    with open(path, "w") as f:
        json.dump(r, f)


@pytest.fixture
def bench_folder(tmp_path, make_run):
    """A folder as bench_peers.sh leaves it: vitddp in two rounds, torch eager in two, torch
    cudagraph and jax in one, the bf16 GEMM ceiling, nvidia-smi samples, a timed-out run and an
    incomplete vitddp file."""
    for r, sps in ((1, 100.0), (2, 110.0)):
        make_run(f"vitddp-vit_l_32-b32-bf16-r{r}.h5", world_size=1, batch_size=32, precision="bf16", backend="gpu",
                 sps=sps, attrs={"model": "vit_l_32", "attention": "custom"})
    (tmp_path / "mem-vitddp-vit_l_32-b32-bf16-r1.txt").write_text("512\n2048\n")
    (tmp_path / "mem-vitddp-vit_l_32-b32-bf16-r2.txt").write_text("1024\n4096\n1000\n")
    peer_json(tmp_path / "torch-eager-vit_l_32-b32-bf16-r1.json", "torch", "eager", 80.0)
    peer_json(tmp_path / "torch-eager-vit_l_32-b32-bf16-r2.json", "torch", "eager", 85.0, compile_s=2.5)
    peer_json(tmp_path / "torch-cudagraph-vit_l_32-b32-bf16-r1.json", "torch", "cudagraph", 95.0)
    peer_json(tmp_path / "jax-vit_l_32-b32-bf16-r1.json", "jax", "jit", 90.0, attention="cudnn")
    with open(tmp_path / "gemm-vit_l_32-b32.json", "w") as f:
        json.dump({"kind": "gemm_ceilings", "model": "vit_l_32", "batch_size": 32,
                   "ceilings": {"bf16": {"train_tflops": 600.0, "forward_tflops": 650.0, "gemms": [
                       {"linear": "qkv", "pass": p, "tflops": t} for p, t in (("fwd", 640.4), ("dgrad", 610.0), ("wgrad", 550.0))]}}}, f)
    with open(tmp_path / "other.json", "w") as f:
        json.dump({"kind": "check"}, f)
    (tmp_path / "runs.tsv").write_text(
        "round\ttool\tmode\tmodel\tbatch\tprecision\trc\tseconds\tfile\n"
        "1\ttorch\teager\tvit_l_32\t32\tbf16\t0\t20.0\ttorch-eager-vit_l_32-b32-bf16-r1.json\n"
        "1\ttorch\tcompile-max-autotune\tvit_l_32\t32\tbf16\t124\t600.0\ttorch-compile-max-autotune-vit_l_32-b32-bf16-r1.json\n")
    with h5py.File(tmp_path / "vitddp-broken.h5", "w") as f:
        f.attrs["model"] = "vit_l_32"
        f.attrs["stop_reason"] = "signal 15 after step 3"
    return tmp_path


def table_rows(text):
    return {cells[0] + " " + cells[1]: cells for cells in
            ([c.strip() for c in line.strip("|").split("|")] for line in text.splitlines() if line.startswith("| ")
             and not line.startswith("| tool") and not line.startswith("| ---"))}


def test_table_values(bench_folder, capsys):
    assert peers_table.main([str(bench_folder)]) == 0
    text = capsys.readouterr().out
    assert "## vit_l_32, batch 32, bf16" in text
    assert "Device: NVIDIA H200." in text
    assert "GEMM ceiling (bf16, FLOP-weighted over the linear layers' training GEMMs at M = 32 x 50 rows): 600.0 TFLOP/s." in text
    assert "forward / data-gradient / weight-gradient GEMM: qkv 640 / 610 / 550." in text
    rows = table_rows(text)
    assert list(rows) == ["vitddp cuda graph on, custom attention", "torch cudagraph", "jax jit, cudnn attention", "torch eager"]
    ours = rows["vitddp cuda graph on, custom attention"]
    tflops = 3 * VIT_L_32_FLOPS * 110.0 * 32 / 1e12  # best round: 110 steps/s x 32 images
    assert ours[2:6] == ["110.00", "3520.0", f"{tflops:.1f}", f"{100 * tflops / 600.0:.1f}%"]
    assert ours[6] == "100.00"  # median_step_time 0.1 s
    assert ours[9] == "4.00"  # 4096 MiB, the larger nvidia-smi peak of the two rounds
    assert ours[11] == "2.3000 -> 2.3000"  # conftest's training/loss
    assert ours[12] == "100.00 / 110.00"
    eager = rows["torch eager"]
    assert eager[2] == "85.00" and eager[7:9] == ["3.00", "4.00"] and eager[10] == "2.5" and eager[9] == "-"
    assert eager[11] == "6.9078 -> 6.5000" and eager[12] == "80.00 / 85.00"
    assert rows["jax jit, cudnn attention"][2] == "90.00"
    assert f"vitddp / best peer (torch cudagraph): {110.0 / 95.0:.2f}x steps/s." in text
    assert "Failed runs: torch compile-max-autotune round 1 (exit 124, timed out)." in text
    assert "Incomplete vitddp files: vitddp-broken.h5 (signal 15 after step 3)." in text


def test_table_reads_packed_samples_and_names_recomputed_gelu(bench_folder, make_run, capsys):
    # A kept folder packs the nvidia-smi samples into mem.tar.xz; a tf32 run recomputing its GELU
    # outputs says so in its mode.
    import tarfile
    with tarfile.open(bench_folder / "mem.tar.xz", "w:xz") as t:
        for name in ("mem-vitddp-vit_l_32-b32-bf16-r1.txt", "mem-vitddp-vit_l_32-b32-bf16-r2.txt"):
            t.add(bench_folder / name, arcname=name)
            (bench_folder / name).unlink()
    make_run("vitddp-vit_l_32-b32-tf32-r1.h5", world_size=1, batch_size=32, precision="tf32", backend="gpu",
             sps=50.0, attrs={"model": "vit_l_32", "attention": "custom", "recompute_gelu": "on"})
    assert peers_table.main([str(bench_folder)]) == 0
    text = capsys.readouterr().out
    rows = table_rows(text)
    assert rows["vitddp cuda graph on, custom attention"][9] == "4.00"  # from mem.tar.xz
    assert rows["vitddp cuda graph on, custom attention, GELU recomputed"][2] == "50.00"
    assert rows["vitddp cuda graph on, custom attention, GELU recomputed"][9] == "-"  # no samples


def test_table_reads_packed_results_files(bench_folder, capsys):
    # A kept folder packs the vitddp results files into h5.tar.xz (results/commands/lib.sh's pack):
    # the same table as from the loose files.
    import tarfile
    assert peers_table.main([str(bench_folder)]) == 0
    loose = capsys.readouterr().out
    with tarfile.open(bench_folder / "h5.tar.xz", "w:xz") as t:
        for f in sorted(bench_folder.glob("*.h5")):
            t.add(f, arcname="./" + f.name)
            f.unlink()
    assert peers_table.main([str(bench_folder)]) == 0
    assert capsys.readouterr().out == loose


def test_table_gives_one_ratio_per_fp32_gemm_contract(tmp_path, make_run, capsys):
    # vitddp strict and with --fp32-matmul tf32x3, against torch (strict) and JAX strict and
    # TF32_TF32_F32_X3: each vitddp row against the best peer of its own contract, then overall.
    for name, sps, mm in (("vitddp-a.h5", 13.6, "ieee"), ("vitddp-b.h5", 17.5, "tf32x3")):
        make_run(name, world_size=1, batch_size=32, precision="fp32", backend="gpu", sps=sps,
                 attrs={"model": "vit_l_32", "attention": "custom", "option.fp32-matmul": mm})
    peer_json(tmp_path / "t.json", "torch", "compile-reduce-overhead", 12.9, precision="fp32")
    peer_json(tmp_path / "j.json", "jax", "jit", 12.8, precision="fp32", attention="xla")
    peer_json(tmp_path / "x.json", "jax", "jit", 15.7, precision="fp32", attention="xla", fp32_matmul="tf32x3")
    assert peers_table.main([str(tmp_path)]) == 0
    text = capsys.readouterr().out
    rows = table_rows(text)
    assert rows["vitddp cuda graph on, custom attention, 3xTF32 GEMMs"][2] == "17.50"
    assert rows["jax jit, xla attention, TF32_TF32_F32_X3 dots"][2] == "15.70"
    assert (f"vitddp / best peer, strict fp32 GEMMs on both sides (torch compile-reduce-overhead): "
            f"{13.6 / 12.9:.2f}x steps/s.") in text
    assert (f"vitddp / best peer, 3xTF32 GEMMs on both sides (jax jit, xla attention, TF32_TF32_F32_X3 dots): "
            f"{17.5 / 15.7:.2f}x steps/s.") in text
    assert "vitddp / best peer, fastest of each whatever the GEMMs (jax jit, xla attention, TF32_TF32_F32_X3 dots)" in text


@pytest.mark.parametrize("args", [["--precision", "bf16"], ["--precision", "fp32", "--device", "cpu"]])
def test_jax_peer_refuses_tf32x3_outside_fp32_on_cuda(args):
    # Refused by the argument parser, before jax is imported (so no jax needed here).
    p = subprocess.run([sys.executable, os.path.join(PEERS, "jax_vit.py"), "--fp32-matmul", "tf32x3", *args],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert "--fp32-matmul tf32x3 needs --precision fp32 and --device cuda" in p.stderr


def test_table_without_ceilings_or_vitddp(tmp_path, capsys):
    peer_json(tmp_path / "a.json", "torch", "eager", 10.0, precision="fp32")
    assert peers_table.main([str(tmp_path)]) == 0
    text = capsys.readouterr().out
    row = table_rows(text)["torch eager"]
    assert row[5] == "-" and "best peer" not in text and "GEMM ceiling" not in text


def test_table_bad_input(tmp_path, capsys):
    assert peers_table.main([str(tmp_path / "missing")]) == 2
    assert "not a folder" in capsys.readouterr().err
    assert peers_table.main([str(tmp_path)]) == 1
    assert "no vitddp results" in capsys.readouterr().err


@pytest.mark.parametrize("env, message", [
    ({}, "usage"),
    ({"MODES": "eager bogus"}, "MODES: unknown mode 'bogus'"),
    ({"MODELS": "vit_x"}, "MODELS: unknown model 'vit_x'"),
    ({"PRECISIONS": "fp16"}, "PRECISIONS: unknown precision 'fp16'"),
    ({"BATCHES": "0"}, "BATCHES: '0' is not a positive integer"),
    ({"ROUNDS": "two"}, "ROUNDS: 'two' is not a positive integer"),
    ({"WARMUP": "1"}, "WARMUP: '1' must be an integer >= 2"),
    ({"VITDDP": "/nonexistent/vitddp"}, "VITDDP: '/nonexistent/vitddp' is not an executable"),
])
def test_bench_peers_rejects_bad_settings(tmp_path, env, message):
    args = ["bash", os.path.join(ROOT, "results", "commands", "bench_peers.sh")]
    if env:
        args.append(str(tmp_path / "out"))
    p = subprocess.run(args, env=dict(os.environ, **env), capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert message in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


# ---- the peers themselves, on the CPU with the tiny size (`pytest --peers`: torch, jax) ----------

def import_peer(name):
    """Imports a peer's framework: a test marked peers fails (not skips) without it."""
    return importlib.import_module(name)


def run_peer(script, *args):
    p = subprocess.run([sys.executable, os.path.join(PEERS, script), *args], capture_output=True, text=True,
                       timeout=600, env=dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1"))
    assert p.returncode == 0, p.stdout + p.stderr
    return p


@pytest.mark.peers
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_torch_peer_eager_on_cpu(tmp_path, precision):
    import_peer("torch")
    import_peer("torchvision")
    out = tmp_path / "r.json"
    run_peer("torch_peers.py", "--model", "tiny", "--device", "cpu", "--precision", precision, "--batch-size", "4",
             "--warmup-steps", "1", "--steps", "3", "--json", str(out))
    r = json.loads(out.read_text())
    assert (r["tool"], r["mode"], r["model"], r["steps"], r["parameter_count"]) == ("torch", "eager", "tiny", 3, 81226)
    # torchvision initializes the head to zeros: the first loss is ln(10) for 10 classes.
    assert r["loss_first"] == pytest.approx(math.log(10), abs=1e-5)
    assert math.isfinite(r["loss_last"]) and r["loss_last"] != r["loss_first"]
    assert r["images_per_s"] == pytest.approx(4 * r["steps_per_s"])
    assert r["tflops"] == pytest.approx(3 * TINY_FLOPS * r["images_per_s"] / 1e12)


@pytest.mark.peers
def test_gemm_ceilings_on_cpu(tmp_path):
    import_peer("torch")
    out = tmp_path / "gemm.json"
    run_peer("torch_peers.py", "--gemm-ceilings", "--model", "tiny", "--batch-size", "2", "--device", "cpu",
             "--gemm-iters", "2", "--gemm-repeats", "1", "--json", str(out))
    r = json.loads(out.read_text())
    assert (r["kind"], r["model"], r["batch_size"]) == ("gemm_ceilings", "tiny", 2)
    assert sorted(r["ceilings"]) == ["bf16", "fp32", "tf32"]
    for c in r["ceilings"].values():
        gemms = c["gemms"]
        assert [(g["linear"], g["pass"]) for g in gemms] == [
            (n, p) for n in ("qkv", "out_proj", "mlp_up", "mlp_down") for p in ("fwd", "dgrad", "wgrad")]
        assert all(g["flops"] == 2 * g["m"] * g["k"] * g["n"] for g in gemms)
        assert {(g["m"], g["k"], g["n"]) for g in gemms if g["linear"] == "qkv"} == {(34, 64, 192), (34, 192, 64), (192, 34, 64)}
        assert c["train_tflops"] == pytest.approx(sum(g["flops"] for g in gemms) / sum(g["ms"] / 1e3 for g in gemms) / 1e12)
        assert min(g["tflops"] for g in gemms) <= c["train_tflops"] <= max(g["tflops"] for g in gemms)


@pytest.mark.peers
def test_torch_peer_rejects_cudagraph_on_cpu():
    import_peer("torch")
    p = subprocess.run([sys.executable, os.path.join(PEERS, "torch_peers.py"), "--mode", "cudagraph", "--device", "cpu"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--mode cudagraph needs --device cuda" in p.stderr


@pytest.mark.peers
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_jax_peer_on_cpu(tmp_path, precision):
    import_peer("jax")
    out = tmp_path / "r.json"
    run_peer("jax_vit.py", "--model", "tiny", "--device", "cpu", "--precision", precision, "--batch-size", "4",
             "--warmup-steps", "1", "--steps", "3", "--json", str(out))
    r = json.loads(out.read_text())
    assert (r["tool"], r["attention"], r["model"], r["parameter_count"]) == ("jax", "xla", "tiny", 81226)
    assert r["loss_first"] == pytest.approx(math.log(10), abs=1e-5)  # zero head, as torchvision's
    assert math.isfinite(r["loss_last"]) and r["loss_last"] != r["loss_first"]
    assert r["tflops"] == pytest.approx(3 * TINY_FLOPS * r["images_per_s"] / 1e12)


@pytest.mark.peers
def test_jax_model_matches_torchvision(tmp_path):
    """Loss, gradient norm, every gradient and the loss after one SGD step of the JAX model on
    torchvision's weights (jax_vit.py --check-against-torch asserts 1e-4; read back here too)."""
    import_peer("jax")
    import_peer("torch")
    import_peer("torchvision")
    out = tmp_path / "check.json"
    run_peer("jax_vit.py", "--model", "tiny", "--device", "cpu", "--precision", "fp32", "--batch-size", "4",
             "--check-against-torch", "--json", str(out))
    r = json.loads(out.read_text())
    assert r["passed"] and r["zero_grad_tensors"] == 0
    assert r["loss_jax"] == pytest.approx(r["loss_torch"], rel=1e-4)
    assert r["grad_norm_jax"] == pytest.approx(r["grad_norm_torch"], rel=1e-4)
    assert r["loss_after_sgd_jax"] == pytest.approx(r["loss_after_sgd_torch"], rel=1e-4)


def test_bench_peers_stopped_by_a_signal_keeps_the_table(bench_folder, tmp_path_factory):
    """SIGTERM (a job's time limit) while a run is in progress: the run is stopped, the table of
    the runs that finished is written, exit 124. vitddp is a stand-in that sleeps; the folder
    already holds finished runs (bench_folder)."""
    tmp = tmp_path_factory.mktemp("stop")
    started = tmp / "started"
    fake = tmp / "vitddp"
    fake.write_text("#!/usr/bin/env bash\ntouch %s\nexec sleep 60\n" % started)
    fake.chmod(0o755)
    (bench_folder / "peers_table.md").unlink(missing_ok=True)
    env = dict(os.environ, VITDDP=str(fake), PYTHON=sys.executable, MODES="none", GEMM="0", ROUNDS="1",
               MPIRUN="", PATH=os.environ["PATH"])
    p = subprocess.Popen(["bash", os.path.join(ROOT, "results", "commands", "bench_peers.sh"), str(bench_folder)],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for _ in range(200):
        if started.exists():
            break
        time.sleep(0.05)
    assert started.exists(), "the stand-in never started"
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 124, out + err
    assert time.monotonic() - t0 < 20  # not after the stand-in's 60 s
    log = (bench_folder / "bench_peers.log").read_text()
    assert "stopped by a signal" in log
    table = (bench_folder / "peers_table.md").read_text()
    assert "| torch | eager |" in table and "| jax | jit, cudnn attention |" in table
