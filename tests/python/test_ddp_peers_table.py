"""results/tools/ddp_peers_table.py (the vitddp-against-PyTorch table of results/commands/zero.sh) on
a hand-made folder: vitddp files written with h5py (conftest.write_run, docs/schema.md), some packed
into h5.tar.xz as zero.sh leaves them, PyTorch JSON as results/bench_torch_ddp.py writes it, and a
`.failed` note. The expected shares and ratios are computed by hand from the figures written."""
import importlib.util
import json
import os
import subprocess
import sys
import tarfile

from conftest import write_run

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(ROOT, "results", "tools", "ddp_peers_table.py")
_spec = importlib.util.spec_from_file_location("ddp_peers_table", SCRIPT)
table = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(table)


def vitddp(folder, name, ranks, sps, precision="bf16", collectives=None, allreduce="nccl", optimizer="adamw"):
    attrs = {"backend": "gpu", "optimizer": optimizer,
             "collectives": collectives or ("all-reduce" if ranks > 1 else "none (no DDP)")}
    return write_run(folder / (name + ".h5"), world_size=ranks, sps=sps, precision=precision,
                     backend="gpu", options={"allreduce": allreduce}, attrs=attrs)


def torch_json(folder, name, ranks, sps, precision="bf16", mode=None, compile_="none", optimizer="adamw"):
    d = {"framework": "pytorch", "world_size": ranks, "model": "vit_l_32", "precision": precision,
         "batch_size": 32, "steps_per_s": sps, "compile": compile_, "optimizer": optimizer,
         "strategy": "ddp" if ranks > 1 else "none", "comm_hook": "none"}
    if mode:
        d["mode"] = mode
    (folder / (name + ".json")).write_text(json.dumps(d))


def job(tmp_path):
    """A zero.sh-like folder: bf16 and fp32 cells, the vitddp files packed as zero.sh packs them."""
    loose = tmp_path / "loose"
    loose.mkdir()
    out = tmp_path / "job"
    out.mkdir()
    vitddp(loose, "bf16-solo0", 1, 4.0)
    vitddp(loose, "bf16-solo1", 1, 3.0)  # not the baseline (--baseline solo0)
    vitddp(loose, "bf16-nccl", 2, 3.8)
    vitddp(loose, "bf16-zero", 2, 3.9, collectives="reduce-scatter + bf16 all-gather (ZeRO-1)")
    vitddp(loose, "bf16-zero-ce", 2, 3.6, collectives="reduce-scatter + bf16 all-gather (ZeRO-1)",
           allreduce="copy-engine")
    vitddp(loose, "fp32-solo0", 1, 1.0, precision="fp32")
    vitddp(loose, "fp32-nccl", 2, 0.95, precision="fp32")
    with tarfile.open(out / "h5.tar.xz", "w:xz") as t:
        for f in sorted(os.listdir(loose)):
            t.add(loose / f, arcname="./" + f)
    torch_json(out, "torch-bf16-1gpu", 1, 3.0)
    torch_json(out, "torch-bf16-1gpu-compile", 1, 3.5, mode="compile reduce-overhead", compile_="reduce-overhead")
    torch_json(out, "torch-bf16-ddp", 2, 2.7)
    torch_json(out, "torch-bf16-ddp-compile", 2, 3.25, mode="DDP + compile reduce-overhead", compile_="reduce-overhead")
    torch_json(out, "torch-bf16-zero1", 2, 2.6, mode="DDP + ZeroRedundancyOptimizer")
    (out / "torch-bf16-fsdp.failed").write_text("2 bf16 timed out after 600 s\n")
    torch_json(out, "torch-fp32-ddp", 2, 0.9, precision="fp32", optimizer="sgd")
    (out / "log.txt").write_text("not a result\n")
    return out


def rows_of(md, precision):
    """{run: [cells]} of the table under '### precision'."""
    block = md.split(f"### {precision}\n", 1)[1].split("\n### ", 1)[0]
    rows = {}
    for line in block.splitlines():
        if line.startswith("| ") and not line.startswith("| run") and not line.startswith("| ---"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0]] = cells[1:]
    return rows, block


def test_shares_ratios_and_failures(tmp_path):
    out = job(tmp_path)
    md = table.render(table.gather(str(out)), "solo0")
    bf16, block = rows_of(md, "bf16")
    # vitddp: share over bf16-solo0 (4.0); vs the fastest PyTorch run of the same GPU count
    # (2 GPUs: torch-bf16-ddp-compile 3.25; 1 GPU: torch-bf16-1gpu-compile 3.5).
    assert bf16["bf16-solo0"] == ["vitddp", "1", "none (no DDP)", "adamw", "4.00", "100.0%", f"{4.0 / 3.5:.2f}x"]
    assert bf16["bf16-solo1"][4:] == ["3.00", "75.0%", f"{3.0 / 3.5:.2f}x"]
    assert bf16["bf16-zero"] == ["vitddp", "2", "reduce-scatter + bf16 all-gather (ZeRO-1)", "adamw", "3.90",
                                 "97.5%", "1.20x"]
    assert bf16["bf16-zero-ce"][2] == "reduce-scatter + bf16 all-gather (ZeRO-1), --allreduce copy-engine"
    assert bf16["bf16-nccl"][4:] == ["3.80", "95.0%", f"{3.8 / 3.25:.2f}x"]
    # PyTorch: eager over the eager 1-GPU run (3.0), compiled over the compiled one (3.5); no ratio column.
    assert bf16["torch-bf16-ddp"] == ["PyTorch", "2", "DDP", "adamw", "2.70", "90.0%", ""]
    assert bf16["torch-bf16-ddp-compile"][2:] == ["DDP + compile reduce-overhead", "adamw", "3.25", "92.9%", ""]
    assert bf16["torch-bf16-zero1"][4:6] == ["2.60", f"{100 * 2.6 / 3.0:.1f}%"]
    assert bf16["torch-bf16-1gpu"][1:2] + bf16["torch-bf16-1gpu"][4:6] == ["1", "3.00", "100.0%"]
    assert bf16["torch-bf16-fsdp"][:2] == ["PyTorch", "2"] and bf16["torch-bf16-fsdp"][4] == "failed: timed out after 600 s"
    assert "Best PyTorch run on 2 GPUs with adamw: `torch-bf16-ddp-compile` (DDP + compile reduce-overhead, 3.25" in block
    assert "Not one optimizer" not in block
    # vitddp rows first, PyTorch's after, the failure last.
    assert list(bf16)[:5] == ["bf16-solo0", "bf16-solo1", "bf16-nccl", "bf16-zero", "bf16-zero-ce"]
    assert list(bf16)[-1] == "torch-bf16-fsdp"
    # fp32: no 1-GPU PyTorch run, so no PyTorch share; the optimizers differ: no ratio, and a note.
    fp32, block = rows_of(md, "fp32")
    assert fp32["fp32-nccl"][4:] == ["0.95", "95.0%", ""]
    assert fp32["fp32-solo0"][6] == ""  # no 1-GPU PyTorch run in fp32
    assert fp32["torch-fp32-ddp"][3:6] == ["sgd", "0.90", ""]
    assert "Not one optimizer: the rows use adamw, sgd" in block
    assert "Best PyTorch run on 2 GPUs with sgd: `torch-fp32-ddp`" in block
    torch_json(out, "torch-fp32-ddp-adamw", 2, 0.5, precision="fp32")
    fp32, _ = rows_of(table.render(table.gather(str(out)), "solo0"), "fp32")
    assert fp32["fp32-nccl"][6] == f"{0.95 / 0.5:.2f}x"  # against the AdamW run, not the faster SGD one
    assert md.index("### fp32") < md.index("### bf16")


def test_baseline_default_and_cli(tmp_path):
    out = job(tmp_path)
    # without --baseline the first 1-rank file by name is the 1-GPU figure: bf16-solo0 (4.0) again
    md = table.render(table.gather(str(out)))
    assert rows_of(md, "bf16")[0]["bf16-zero"][5] == "97.5%"
    p = subprocess.run([sys.executable, SCRIPT, str(out), "--baseline", "solo1", "-o", str(tmp_path / "t.md")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert rows_of((tmp_path / "t.md").read_text(), "bf16")[0]["bf16-zero"][5] == "130.0%"  # 3.9 / 3.0
    empty = tmp_path / "empty"
    empty.mkdir()
    for args in ([str(empty)], [str(tmp_path / "missing")]):
        p = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)
        assert p.returncode == 2 and "ddp_peers_table.py: " in p.stderr and p.stdout == ""
