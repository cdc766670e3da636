"""results/bench_torch_ddp.py's data-parallel strategies on the CPU (gloo, 2 processes under
mpirun; marked peers: run with `pytest --peers` where torch, torchvision and mpirun are): PyTorch's ZeRO-1
(ZeroRedundancyOptimizer) and FSDP2 (fully_shard) train the same fixed batches as its DDP, so in
fp32 their losses after a few SGD steps equal DDP's, and so they do with --optimizer adamw; the
JSON names the strategy and the optimizer's arguments."""
import json
import math
import os
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.peers

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(ROOT, "results", "bench_torch_ddp.py")


def run_two_ranks(tmp_path, name, *args):
    """Runs the script on 2 gloo ranks (vit_b_32 at 64 x 64, batch 2, 1 + 3 steps); its JSON."""
    out = tmp_path / (name + ".json")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1",
               PYTHONWARNINGS="ignore", MASTER_PORT=str(29600 + abs(hash(name)) % 300))
    p = subprocess.run(["mpirun", "--oversubscribe", "-np", "2", sys.executable, SCRIPT, "--device", "cpu",
                        "--model", "vit_b_32", "--image-size", "64", "--batch-size", "2", "--warmup-steps", "1",
                        "--steps", "3", "--json", str(out), *args],
                       capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return json.loads(out.read_text())


def test_zero1_and_fsdp2_train_like_ddp(tmp_path):
    import torch  # noqa: F401  (a peers test fails, not skips, without its framework)
    import torchvision  # noqa: F401
    assert shutil.which("mpirun"), "no mpirun on PATH"
    ddp = run_two_ranks(tmp_path, "ddp")
    zero = run_two_ranks(tmp_path, "zero1", "--strategy", "zero1")
    fsdp = run_two_ranks(tmp_path, "fsdp", "--strategy", "fsdp")
    # torchvision initializes the head to zeros: the first loss is ln(1000).
    for r in (ddp, zero, fsdp):
        assert r["world_size"] == 2 and r["loss_first"] == pytest.approx(math.log(1000), abs=1e-5)
    assert ddp["loss_last"] != pytest.approx(ddp["loss_first"], abs=1e-3)  # 4 SGD steps moved it
    assert zero["loss_last"] == pytest.approx(ddp["loss_last"], rel=1e-6)
    assert fsdp["loss_last"] == pytest.approx(ddp["loss_last"], rel=1e-6)
    assert (ddp["strategy"], zero["strategy"], fsdp["strategy"]) == ("ddp", "zero1", "fsdp")
    assert "mode" not in ddp and zero["mode"] == "DDP + ZeroRedundancyOptimizer" and fsdp["mode"] == "FSDP2"
    assert fsdp["comm_hook"] == "none" and zero["compile"] == "none"


def test_adamw_trains_alike_under_every_strategy(tmp_path):
    """--optimizer adamw: torch.optim.AdamW with vitddp's defaults (lr 0.001, betas (0.9, 0.999), eps
    1e-8, weight decay 0: vitddp --help), the same under DDP, ZeRO-1 and FSDP2; not SGD's losses."""
    import torch  # noqa: F401  (a peers test fails, not skips, without its framework)
    import torchvision  # noqa: F401
    assert shutil.which("mpirun"), "no mpirun on PATH"
    sgd = run_two_ranks(tmp_path, "sgd-ref")
    ddp = run_two_ranks(tmp_path, "ddp-adamw", "--optimizer", "adamw")
    zero = run_two_ranks(tmp_path, "zero1-adamw", "--strategy", "zero1", "--optimizer", "adamw")
    fsdp = run_two_ranks(tmp_path, "fsdp-adamw", "--strategy", "fsdp", "--optimizer", "adamw")
    for r in (ddp, zero, fsdp):
        assert r["optimizer"] == "adamw" and r["lr"] == 1e-3
        assert r["adamw"] == {"betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0, "fused": False}
    assert sgd["optimizer"] == "sgd" and sgd["adamw"] == {}
    # The same start; AdamW's steps move each weight by about lr (m / sqrt(v) ~ 1), the head's far
    # more than SGD's lr x gradient: 4 steps take the loss from ln(1000) = 6.91 to about 3.4 (SGD 6.3).
    assert ddp["loss_first"] == pytest.approx(sgd["loss_first"], abs=1e-6)
    assert ddp["loss_last"] < sgd["loss_last"] - 1.0
    assert zero["loss_last"] == pytest.approx(ddp["loss_last"], rel=1e-5)
    assert fsdp["loss_last"] == pytest.approx(ddp["loss_last"], rel=1e-5)
