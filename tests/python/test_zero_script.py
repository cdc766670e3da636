"""results/commands/zero.sh's plumbing without a GPU: nvidia-smi, mpirun, vitddp and PyTorch's python
are stand-ins (written here) that record their arguments and write results files like the real ones
(vitddp: conftest.write_run, docs/schema.md; PyTorch: the JSON keys of results/bench_torch_ddp.py).
Checked: the cells the job runs, one optimizer for both tools, the bf16 ZeRO-1 cell with fp32
all-gathers, a failing and a timed-out PyTorch run that leave `.failed` notes and let the job go on,
and the README with the peers table (results/tools/ddp_peers_table.py)."""
import os
import stat
import subprocess
import sys
import textwrap

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
HERE = os.path.dirname(os.path.abspath(__file__))


def script(path, body):
    path.write_text(body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def stand_ins(tmp):
    calls = tmp / "calls.txt"
    bindir = tmp / "bin"
    bindir.mkdir()
    script(bindir / "nvidia-smi", "#!/bin/sh\n[ \"$1\" = -L ] && printf 'GPU 0: stand-in\\nGPU 1: stand-in\\n'\nexit 0\n")
    # mpirun: drops its own options, runs the program once with the world size in OMPI_COMM_WORLD_SIZE
    mpirun = script(tmp / "mpirun", textwrap.dedent("""\
        #!/bin/bash
        n=1
        while [ $# -gt 0 ]; do
          case $1 in --bind-to|-x) shift 2;; -np) n=$2; shift 2;; --*) shift;; *) break;; esac
        done
        OMPI_COMM_WORLD_SIZE=$n exec "$@"
        """))
    vitddp = script(tmp / "vitddp", textwrap.dedent(f"""\
        #!{sys.executable}
        import os, sys
        sys.path.insert(0, {HERE!r})
        from conftest import write_run
        a = sys.argv[1:]
        if a == ["--version"]:
            sys.exit(0)
        open({str(calls)!r}, "a").write("vitddp " + " ".join(a) + "\\n")
        opt = lambda k, d=None: a[a.index(k) + 1] if k in a else d
        n = int(os.environ["OMPI_COMM_WORLD_SIZE"])
        p = opt("--precision")
        coll = "all-reduce" if n > 1 else "none (no DDP)"
        if "--shard-optimizer" in a:
            bf16 = opt("--allgather-dtype", "auto") == "bf16" or (opt("--allgather-dtype", "auto") == "auto" and p == "bf16")
            coll = "reduce-scatter + bf16 all-gather (ZeRO-1)" if bf16 else "reduce-scatter + all-gather (ZeRO-1)"
        sps = {{1: 4.0, 2: 3.8}}[n] + (0.1 if "--shard-optimizer" in a else 0.0)
        write_run(opt("--out"), world_size=n, precision=p, backend="gpu", sps=sps,
                  attrs={{"optimizer": opt("--optimizer"), "collectives": coll}},
                  options={{"allreduce": opt("--allreduce", "nccl")}})
        print("timed window: stand-in")
        """))
    torch_py = script(tmp / "torch-python", textwrap.dedent(f"""\
        #!{sys.executable}
        import json, os, sys, time
        a = sys.argv[2:]
        open({str(calls)!r}, "a").write("torch " + " ".join(a) + "\\n")
        opt = lambda k, d=None: a[a.index(k) + 1] if k in a else d
        if opt("--strategy") == "fsdp":
            print("RuntimeError: stand-in failure | with a bar", file=sys.stderr)
            sys.exit(1)
        if opt("--strategy") == "ddp" and opt("--compile") == "reduce-overhead":
            time.sleep(60)
        n = int(os.environ["OMPI_COMM_WORLD_SIZE"])
        d = {{"framework": "pytorch", "world_size": n, "model": "vit_l_32", "precision": opt("--precision"),
             "batch_size": 32, "steps_per_s": 3.0 if n == 1 else 2.85, "optimizer": opt("--optimizer"),
             "compile": opt("--compile", "none")}}
        json.dump(d, open(opt("--json"), "w"))
        print("TORCHDDP steps_per_s=%g" % d["steps_per_s"])
        """))
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}", MPIRUN=mpirun, VITDDP=vitddp,
               TORCH_PYTHON=torch_py, PYTHON=sys.executable, PRECISIONS="bf16", STEPS="2", WARMUP="1",
               TORCH_TIMEOUT="20", TORCH_COMPILE_TIMEOUT="3")
    return env, calls


def test_zero_sh_runs_every_cell_and_survives_failing_peers(tmp_path):
    env, calls = stand_ins(tmp_path)
    out = tmp_path / "out"
    p = subprocess.run(["bash", os.path.join(ROOT, "results", "commands", "zero.sh"), str(out)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    lines = calls.read_text().splitlines()
    vit = [line for line in lines if line.startswith("vitddp ")]
    torch = [line for line in lines if line.startswith("torch ")]
    names = [line.split("--out ")[1].split()[0].rsplit("/", 1)[1] for line in vit]
    assert names == [f"bf16-{c}.h5" for c in ("solo0", "solo1", "nccl", "ce", "ce-bf16", "zero", "zero-fp32gather",
                                               "zero-ce", "solo0-end")]
    assert "--shard-optimizer --allgather-dtype fp32" in vit[6]
    assert all("--optimizer adamw" in line for line in vit + torch)
    jsons = [line.split("--json ")[1].split()[0].rsplit("/", 1)[1] for line in torch]
    assert jsons == [f"torch-bf16-{c}.json" for c in ("1gpu", "1gpu-compile", "ddp", "ddp-compile", "zero1", "fsdp")]
    ports = [line.split("--master-port ")[1].split()[0] for line in torch]
    assert len(set(ports)) == 6
    assert "--no-ddp --compile reduce-overhead" in torch[1] and "--strategy zero1" in torch[4]
    # the failures: notes in the folder, lines in the log, rows in the README; the job went on
    assert (out / "torch-bf16-fsdp.failed").read_text().startswith("2 bf16 exit 1: RuntimeError: stand-in failure / with")
    assert (out / "torch-bf16-ddp-compile.failed").read_text() == "2 bf16 timed out after 3 s\n"
    assert not (out / "torch-bf16-fsdp.json").exists() and not (out / "torch-bf16-ddp-compile.json").exists()
    log = (out / "log.txt").read_text()
    assert "torch-bf16-fsdp: FAILED (exit 1" in log and "torch-bf16-ddp-compile: FAILED (timed out after 3 s)" in log
    assert (out / "h5.tar.xz").is_file() and not list(out.glob("*.h5"))
    readme = (out / "README.md").read_text()
    assert "## vitddp against PyTorch's data-parallel peers" in readme
    peers = readme.split("## vitddp against PyTorch's data-parallel peers", 1)[1]
    row = lambda name, md=None: next(line for line in (md or peers).splitlines() if line.startswith(f"| {name} |"))
    assert "| failed: timed out after 3 s |" in row("torch-bf16-ddp-compile")
    assert "failed: exit 1: RuntimeError" in row("torch-bf16-fsdp")
    # bf16-zero: 3.9 steps/s over solo0's 4.0 and over the best 2-GPU PyTorch run (2.85)
    assert row("bf16-zero").endswith(f"| 3.90 | 97.5% | {3.9 / 2.85:.2f}x |")
    assert "reduce-scatter + all-gather (ZeRO-1)" in row("bf16-zero-fp32gather")
    # --readme rewrites it from the folder alone, the table included
    (out / "README.md").unlink()
    p = subprocess.run(["bash", os.path.join(ROOT, "results", "commands", "zero.sh"), "--readme", str(out)], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert row("bf16-zero") == row("bf16-zero", (out / "README.md").read_text().split("## vitddp against", 1)[1])


def test_zero_sh_no_torch(tmp_path):
    env, calls = stand_ins(tmp_path)
    env["NO_TORCH"] = "1"
    out = tmp_path / "out"
    p = subprocess.run(["bash", os.path.join(ROOT, "results", "commands", "zero.sh"), str(out)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert not [line for line in calls.read_text().splitlines() if line.startswith("torch ")]
    assert "No PyTorch run finished in this precision." in (out / "README.md").read_text()
