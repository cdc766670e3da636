"""vitddp-report predict: bucket assignment against torch's, PowerSGD's byte rule, link tables, the
comm-stream schedule and a whole prediction on a hand-made results file, with hand-computed values."""
import json
import os

import h5py
import numpy as np
import pytest

from vitddp_tools import report
from vitddp_tools.predict_core import Baseline, Reference, Scenario, predict, schedule
from vitddp_tools.predict import machine_of, validate
from vitddp_tools.predict_link import fit_alpha_beta, parse_table
from vitddp_tools.predict_model import assign_buckets, powersgd_bucket, powersgd_compresses, vit_parameters
from vitddp_tools.reader import ResultsError, Run

DATA = os.path.join(os.path.dirname(__file__), "..", "data")


def test_vit_l_32_parameter_count():
    assert sum(p.numel for p in vit_parameters("vit_l_32")) == 306_535_400  # torchvision's count


def test_buckets_equal_torch_assignment():
    """tests/data/ddp_buckets_vit_l_32.txt: torch's _compute_bucket_assignment_by_size per cap (MiB):
    rows 'cap bucket tensors bytes', first bucket 1 MiB."""
    want = {}
    with open(os.path.join(DATA, "ddp_buckets_vit_l_32.txt")) as f:
        for line in f:
            if line.startswith("#"):
                continue
            cap, _, tensors, nbytes = line.split()
            want.setdefault(float(cap), []).append((int(tensors), int(nbytes)))
    assert set(want) == {1, 5, 25, 100, 500, 2000}
    params = vit_parameters("vit_l_32")
    for cap, rows in want.items():
        got = [(len(b.params), b.nbytes) for b in assign_buckets(params, cap, 1.0)]
        assert got == rows, cap


def test_powersgd_rule_and_bytes():
    assert powersgd_compresses(1024, 1024, 1, 2.0)          # (2048) x 1 x 2 < 1048576
    assert not powersgd_compresses(1024, 1, 1, 2.0)         # a bias: (1025) x 1 x 2 >= 1024
    assert not powersgd_compresses(4, 4, 4, 2.0)            # r = 4: (8) x 4 x 2 = 64 >= 16
    assert powersgd_compresses(4, 4, 1, 1.0)                # 8 < 16
    head = assign_buckets(vit_parameters("vit_l_32"), 25)[0]  # heads.head.bias [1000], heads.head.weight [1000, 1024]
    d = powersgd_bucket(head, rank=1, min_compression_rate=2.0)
    assert (d["uncompressed"], d["p"], d["q"], d["calls"]) == (1000, 1000, 1024, 3)
    assert d["bytes"] == 4 * (1000 + 1000 + 1024) == 12096   # buckets/bytes_sent of the measured runs


def test_schedule_by_hand():
    start, end = schedule([0.0, 1.0, 5.0, 5.5], [2.0, 1.0, 1.0, 0.25])
    # bucket 1 waits for bucket 0 (ends at 2), bucket 2 finds the stream idle, bucket 3 waits for 2
    assert start.tolist() == [0.0, 2.0, 5.0, 6.0]
    assert end.tolist() == [2.0, 3.0, 6.0, 6.25]


def test_link_table_interpolation_and_errors():
    t = parse_table("transport,collective,bytes,alpha_us,busbw_GBps\n# c\nx,allreduce,1000,10,1\n"
                    "x,allreduce,4000,30,3\ny,allreduce,,0,2\n", "t.csv")
    # 2000 bytes: halfway in log2 between 1000 and 4000 -> alpha 20 us, busbw 2 GB/s; 2 ranks: factor 1
    assert t.time("x", "allreduce", 2000, 2) == pytest.approx(20e-6 + 2000 / 2e9)
    assert t.time("x", "allreduce", 100, 2) == pytest.approx(10e-6 + 100 / 1e9)       # held below
    assert t.time("y", "allreduce", 1e6, 4) == pytest.approx(1e6 * 1.5 / 2e9)          # 2(n-1)/n = 1.5
    assert t.time("y", "reducescatter", 1e6, 4) == pytest.approx(1e6 * 0.75 / 2e9)     # all-reduce's rows
    assert t.time("y", "allreduce", 1e6, 1) == 0.0
    with pytest.raises(ResultsError, match="no row for transport 'z'"):
        t.time("z", "allreduce", 1, 2)
    with pytest.raises(ResultsError, match="data row 1"):
        parse_table("transport,collective,alpha_us,busbw_GBps\nx,allreduce,1,-2\n", "bad.csv")


def test_fit_alpha_beta_recovers_the_line():
    b = np.array([1e6, 4e6, 16e6, 64e6])
    alpha, bw = fit_alpha_beta(b, 25e-6 + b / 50e9)
    assert alpha == pytest.approx(25e-6, rel=1e-6) and bw == pytest.approx(50.0, rel=1e-6)


MICRO_BYTES = 4 * (1701 + 3)  # vit_micro: 1701 parameters, heads.head.bias (5) padded to 8


def write_micro_run(path, world_size=2, backward=0.05, start=0.01, end=0.05, sps=None, ready=None,
                    compression="none", sent=MICRO_BYTES, gpu="NVIDIA H200"):
    """A vit_micro results file (docs/schema.md) with one 25 MiB bucket: input wait 0.001 s, forward
    0.019 s, `backward`, optimizer 0.01 s, the bucket's comm work from `start` to `end` after backward
    starts, exposed 0; steps/s such that the host adds 1 ms to each step. `ready`: the
    --record-grad-ready datasets, (prefix_bytes [G], ready_time [R, S, G] seconds from the step
    start); grad_ready/bytes are the prefix's differences. `sent`: buckets/bytes_sent of the bucket;
    `gpu`: device_names of every rank (NCCL 2.28.3 in `versions`)."""
    R, S = world_size, 4
    step = 0.001 + 0.019 + backward + 0.01
    with h5py.File(path, "w") as f:
        for k, v in {"model": "vit_micro", "world_size": R, "batch_size": 8, "backend": "gpu", "precision": "fp32",
                     "compression": compression, "ddp": int(R > 1), "overlap": 1, "num_buckets": 1,
                     "nccl_transport": np.array(["P2P [P2P/CUMEM]"] * R, dtype=h5py.string_dtype()),
                     "device_names": np.array([gpu] * R, dtype=h5py.string_dtype()),
                     "versions": "CUDA runtime 13000, NCCL 2.28.3"}.items():
            f.attrs[k] = v
        for k, v in {"bucket-cap-mb": "25", "first-bucket-mb": "1", "grad-accum-steps": "1",
                     "compression": compression, "num-classes": "0"}.items():
            f.attrs["option." + k] = v
        full = lambda v: np.full((R, S), v)
        for name, v in (("input_wait", 0.001), ("forward", 0.019), ("backward", backward), ("optimizer", 0.01),
                        ("exposed_comm", 0.0), ("step_time", step)):
            f["timing/" + name] = full(v)
        f["steps/timed"] = np.array([[0, 1, 1, 0]], dtype=np.int64)
        f["buckets/bytes"] = np.array([MICRO_BYTES], dtype=np.int64)
        f["buckets/allreduce_start"] = np.full((R, S, 1), 0.02 + start)
        f["buckets/allreduce_end"] = np.full((R, S, 1), 0.02 + end)
        f["buckets/allreduce_time"] = np.full((R, S, 1), end - start)
        f["buckets/bytes_sent"] = np.full((R, S, 1), sent if R > 1 else 0, dtype=np.int64)
        f["summary/steps_per_second"] = float(sps or 1.0 / (step + 0.001))
        if ready is not None:
            prefix, times = np.asarray(ready[0], dtype=np.int64), np.asarray(ready[1], dtype=float)
            d = f.create_dataset("grad_ready/ready_time", data=times)
            d.attrs["units"], d.attrs["axes"] = "s", "rank,step,group"
            f["grad_ready/prefix_bytes"] = prefix
            f["grad_ready/bytes"] = np.diff(np.concatenate([[0], prefix]))
    return str(path)


def test_prediction_on_a_hand_made_run(tmp_path):
    ref_path = write_micro_run(tmp_path / "ref.h5")
    base_path = write_micro_run(tmp_path / "one.h5", world_size=1, backward=0.04)
    table = parse_table("transport,collective,alpha_us,busbw_GBps\nnvlink,allreduce,100,0.001\n", "t")
    with Run(ref_path) as r:
        ref = Reference.from_run(r)
    with Run(base_path) as r:
        base = Baseline.from_run(r)
    assert ref.transport == "nvlink" and ref.forward == pytest.approx(0.02) and ref.host_gap == pytest.approx(0.001)
    assert ref.busy_in_backward == pytest.approx(0.04)  # comm work from 0.01 to 0.05 inside a 0.05 s backward
    comm = 100e-6 + MICRO_BYTES * 1.0 / 1e6             # alpha + bytes x 2(n-1)/n / busbw, 2 ranks
    # no baseline: backward stays the reference's; the one bucket is ready at its end
    p = predict(ref, Scenario(ranks=2, transport="nvlink", cap_mb=25), table)
    assert p.buckets == 1 and p.backward == pytest.approx(0.05) and p.exposed == pytest.approx(comm)
    assert p.step == pytest.approx(0.02 + 0.05 + comm + 0.01 + 0.001)
    assert p.dominant == "compute"
    assert any("factor 1.0" in a for a in p.assumptions)
    # baseline: k = (0.05 - 0.04) / 0.04; the prediction's comm runs after backward -> backward 0.04
    p = predict(ref, Scenario(ranks=2, transport="nvlink", cap_mb=25), table, base)
    assert p.backward == pytest.approx(0.04) and p.exposed == pytest.approx(comm)
    # 4 ranks: factor 1.5; ZeRO-1: reduce-scatter (factor 0.75) + fp32 all-gather, optimizer / 4
    p = predict(ref, Scenario(ranks=4, transport="nvlink", cap_mb=25, mode="zero1"), table, base)
    rs = 100e-6 + MICRO_BYTES * 0.75 / 1e6
    assert p.exposed == pytest.approx(rs) and p.allgather_total == pytest.approx(rs) and p.optimizer == pytest.approx(0.0025)
    assert p.allgather == pytest.approx(rs)  # one bucket: it is the first gathered, before forward starts
    assert p.step == pytest.approx(0.02 + 0.04 + 2 * rs + 0.0025 + 0.001)
    with pytest.raises(ResultsError, match="no 16-bit reduce-scatter"):
        predict(ref, Scenario(ranks=4, transport="nvlink", cap_mb=25, mode="zero1", compression="bf16"), table, base)
    with pytest.raises(ResultsError, match="must not exceed"):
        predict(ref, Scenario(ranks=4, transport="nvlink", cap_mb=25, first_mb=50), table, base)
    slow = parse_table("transport,collective,alpha_us,busbw_GBps\nnvlink,allreduce,30000,0.001\n", "slow")
    p = predict(ref, Scenario(ranks=4, transport="nvlink", cap_mb=25, mode="zero1"), slow, base)
    gather = 0.03 + MICRO_BYTES * 0.75 / 1e6            # one bucket, gathered before forward can start
    assert p.allgather_total == pytest.approx(gather) and p.allgather == pytest.approx(gather)


def test_cli_json_and_errors(tmp_path, capsys):
    ref_path = write_micro_run(tmp_path / "ref.h5")
    tab = tmp_path / "t.csv"
    tab.write_text("transport,collective,alpha_us,busbw_GBps\nnvlink,allreduce,0,0.001\n")
    assert report.main(["predict", ref_path, "--link-table", str(tab), "--compression", "bf16", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["exposed_comm_s"] == pytest.approx(MICRO_BYTES / 2 / 1e6)  # bf16: half the bytes
    assert report.main(["predict", ref_path, "--link-table", str(tab), "--transport", "shm"]) == 2
    assert "no row for it" in capsys.readouterr().err
    assert report.main(["predict", ref_path, "--link-table", str(tmp_path / "none.csv")]) == 2
    assert "none.csv" in capsys.readouterr().err
    assert report.main(["predict", ref_path, "--link-table", str(tab), "--ranks", "0"]) == 2
    assert "--ranks must be >= 1" in capsys.readouterr().err
    assert report.main(["predict", ref_path, "--baseline", ref_path]) == 2
    assert "a 1-GPU run is needed" in capsys.readouterr().err
    other = write_micro_run(tmp_path / "one.h5", world_size=1)
    with h5py.File(other, "r+") as f:
        f.attrs["batch_size"] = 16
    assert report.main(["predict", ref_path, "--link-table", str(tab), "--baseline", other]) == 2
    assert "vit_micro, batch 16, fp32; the reference is vit_micro, batch 8, fp32" in capsys.readouterr().err
    for argv, want in ((["--plot", str(tmp_path / "p.png")], "--plot: only with --validate"),
                       (["--leave-one-out"], "--leave-one-out: only with --validate"),
                       (["--powersgd-rate", "nan"], "--powersgd-rate nan: must be a finite number > 0"),
                       (["--bucket-cap-mb", "inf"], "--bucket-cap-mb inf: must be a finite number > 0"),
                       (["--fit-link", ref_path], "--fit-link: not with --link-table"),
                       (["-o", ref_path], "is also an input of this command"),
                       (["--write-link-table", str(tab)], "is also an input of this command")):
        assert report.main(["predict", ref_path, "--link-table", str(tab)] + argv) == 2, argv
        assert want in capsys.readouterr().err, argv
    assert tab.read_text().startswith("transport,collective,alpha_us,busbw_GBps\n")


def test_validate_a_folder(tmp_path, capsys):
    d = tmp_path / "runs"
    d.mkdir()
    write_micro_run(d / "b25.h5")
    write_micro_run(d / "slow.h5", sps=5.0)
    write_micro_run(d / "one.h5", world_size=1, backward=0.04)
    out = tmp_path / "v.md"
    assert report.main(["predict", "--validate", str(d), "-o", str(out), "--plot", str(tmp_path / "v.png")]) == 0
    text = out.read_text()
    assert "b25 **ref**" in text and "| slow |" in text and os.path.getsize(tmp_path / "v.png") > 0


# Recorded gradient-ready times (--record-grad-ready): three groups whose prefixes end at 1000,
# 4000 and all bytes. Backward starts at 0.02 s (input wait + forward) and lasts 0.05 s.
READY_PREFIX = [1000, 4000, MICRO_BYTES]


def ready_times(R=2, S=4):
    """[R, S, 3] ready times: 5, 10, 49 ms into backward; rank 1 has group 0 2 ms later on timed step 1
    (the slowest rank per step counts); the untimed steps 0 and 3 are far off (they must not)."""
    t = np.empty((R, S, 3))
    t[:] = 0.02 + np.array([0.005, 0.010, 0.049])
    t[1, 1, 0] += 0.002
    t[:, 0] = t[:, 3] = 0.5
    return t


def test_reader_grad_ready(tmp_path):
    path = write_micro_run(tmp_path / "r.h5", ready=(READY_PREFIX, ready_times()))
    with Run(path) as r:
        assert r.has_grad_ready()
        g = r.grad_ready()
        assert g.groups == 3 and g.ready_time.shape == (2, 4, 3)
        assert g.prefix_bytes.tolist() == READY_PREFIX and g.bytes.tolist() == [1000, 3000, MICRO_BYTES - 4000]
        assert r.group_series("grad_ready/ready_time")[1, 1, 0] == pytest.approx(0.027)
    with Run(write_micro_run(tmp_path / "none.h5")) as r:
        assert not r.has_grad_ready()
        with pytest.raises(ResultsError, match="none.h5: no gradient-ready times recorded .*--record-grad-ready"):
            r.grad_ready()


def test_reference_uses_the_recorded_ready_curve(tmp_path):
    with Run(write_micro_run(tmp_path / "r.h5", ready=(READY_PREFIX, ready_times()))) as r:
        ref = Reference.from_run(r)
    assert ref.ready_source == "recorded" and ref.ready_groups == 3
    assert ref.ready_bytes.tolist() == [0.0] + [float(b) for b in READY_PREFIX]
    # medians over the timed steps 1, 2 of the slowest rank: (5 or 7 ms) -> 6 ms, 10 ms, 49 ms; / 50 ms
    assert ref.ready_frac == pytest.approx([0.0, 0.12, 0.2, 0.98])
    assert ref.ready_fraction(2500.0) == pytest.approx(0.16)  # halfway between 1000 and 4000 bytes
    # the same file without grad_ready/*: the inferred curve (no idle bucket: linear up to the end)
    with Run(write_micro_run(tmp_path / "n.h5")) as r:
        inferred = Reference.from_run(r)
    assert inferred.ready_source == "inferred"
    assert inferred.ready_bytes.tolist() == [0.0, float(MICRO_BYTES)] and inferred.ready_frac.tolist() == [0.0, 1.0]


def test_prediction_schedules_buckets_on_the_recorded_curve(tmp_path):
    with Run(write_micro_run(tmp_path / "r.h5", ready=(READY_PREFIX, ready_times()))) as r:
        ref = Reference.from_run(r)
    table = parse_table("transport,collective,alpha_us,busbw_GBps\nnvlink,allreduce,100,0.001\n", "t")
    cap = 1500 / 2 ** 20  # buckets of about 1500 bytes: several, each ready on the recorded curve
    sc = Scenario(ranks=2, transport="nvlink", cap_mb=cap, first_mb=cap)
    p = predict(ref, sc, table)
    ends = 4.0 * np.array([b.end_elem for b in assign_buckets(vit_parameters("vit_micro"), cap, cap)])
    assert p.buckets == len(ends) > 2
    want = np.interp(ends, [0.0] + READY_PREFIX, [0.0, 0.12, 0.2, 0.98]) * 0.05
    want[-1] = 0.05  # the last bucket at the end of backward
    assert p.ready == pytest.approx(want)
    assert p.start[0] == pytest.approx(want[0])  # the first bucket finds the stream idle at its ready time
    assert any("recorded in the reference (--record-grad-ready" in a and "3 groups" in a for a in p.assumptions)
    with Run(write_micro_run(tmp_path / "n.h5")) as r:
        q = predict(Reference.from_run(r), sc, table)
    assert any("inferred (the reference has no grad_ready/ready_time" in a for a in q.assumptions)
    assert q.ready[0] == pytest.approx(ends[0] / MICRO_BYTES * 0.05)  # linear in the bytes


def test_recorded_curve_that_ends_elsewhere_is_refused(tmp_path):
    path = write_micro_run(tmp_path / "bad.h5", ready=([1000, 4000, MICRO_BYTES + 16], ready_times()))
    with Run(path) as r, pytest.raises(ResultsError, match="bad.h5: grad_ready/prefix_bytes ends at 6832 bytes"):
        Reference.from_run(r)


def test_a_zero1_reference_is_refused(tmp_path):
    path = write_micro_run(tmp_path / "zero.h5")
    with h5py.File(path, "a") as f:
        f.attrs["option.shard-optimizer"] = "true"
    with Run(path) as r, pytest.raises(ResultsError, match="zero.h5: a ZeRO-1 run"):
        Reference.from_run(r)


def test_zero1_allgather_dtype_bf16_moves_half_the_bytes(tmp_path, capsys):
    ref_path = write_micro_run(tmp_path / "ref.h5")
    with h5py.File(ref_path, "a") as f:
        f.attrs["precision"] = "bf16"
    base_path = write_micro_run(tmp_path / "one.h5", world_size=1, backward=0.04)
    table = parse_table("transport,collective,alpha_us,busbw_GBps\nnvlink,allreduce,100,0.001\n", "t")
    with Run(ref_path) as r:
        ref = Reference.from_run(r)
    with Run(base_path) as r:
        base = Baseline.from_run(r)
    zero = dict(ranks=4, transport="nvlink", cap_mb=25, mode="zero1", precision="bf16")
    fp32 = predict(ref, Scenario(allgather_dtype="fp32", **zero), table, base)
    auto = predict(ref, Scenario(**zero), table, base)
    assert auto.scenario.gathered_dtype() == "bf16" and fp32.scenario.gathered_dtype() == "fp32"
    # one bucket, 4 ranks: alpha + bytes x (n-1)/n / busbw, bf16 = half of the fp32 bytes
    assert fp32.allgather_total == pytest.approx(100e-6 + MICRO_BYTES * 0.75 / 1e6)
    assert auto.allgather_total == pytest.approx(100e-6 + MICRO_BYTES / 2 * 0.75 / 1e6)
    assert auto.step == pytest.approx(fp32.step - MICRO_BYTES / 2 * 0.75 / 1e6)
    assert any("bf16 parameters" in a for a in auto.assumptions)
    # auto gathers fp32 on one rank and under fp32; bf16 is refused for a reference that is not bf16
    assert Scenario(ranks=1, transport="nvlink", cap_mb=25, mode="zero1", precision="bf16").gathered_dtype() == "fp32"
    assert Scenario(ranks=4, transport="nvlink", cap_mb=25, mode="zero1", precision="tf32").gathered_dtype() == "fp32"
    with pytest.raises(ResultsError, match="--allgather-dtype bf16: the reference runs in tf32"):
        predict(ref, Scenario(ranks=4, transport="nvlink", cap_mb=25, mode="zero1", precision="tf32",
                              allgather_dtype="bf16"), table, base)
    tab = tmp_path / "t.csv"
    tab.write_text("transport,collective,alpha_us,busbw_GBps\nnvlink,allreduce,100,0.001\n")
    assert report.main(["predict", ref_path, "--link-table", str(tab), "--ranks", "4", "--mode", "zero1", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["scenario"]["gathered_dtype"] == "bf16" and d["allgather_total_s"] == pytest.approx(auto.allgather_total)
    # the dtype of an all-gather DDP does not run is refused, as vitddp refuses it
    assert report.main(["predict", ref_path, "--link-table", str(tab), "--allgather-dtype", "fp32"]) == 2
    assert "--allgather-dtype fp32: has no effect without --mode zero1" in capsys.readouterr().err


def test_small_sizes_from_a_second_table_by_hand():
    own = parse_table("transport,collective,bytes,alpha_us,busbw_GBps\nx,allreduce,1000000,20,10\n"
                      "x,allreduce,4000000,30,20\n", "own.csv")
    lender = parse_table("transport,collective,bytes,alpha_us,busbw_GBps\nx,allreduce,1000,2,1\n"
                         "x,allreduce,4000,4,2\nx,allreduce,2000000,1,1\nx,cast,100,1,1\n", "lend.csv")
    # alone: a 2000-byte call takes the 1 MB row's alpha and busbw, and says so
    assert own.time("x", "allreduce", 2000, 2) == pytest.approx(20e-6 + 2000 / 10e9)
    assert own.held_used == {("x", "allreduce")} and "calls below 1000000 bytes" in own.notes[0]
    t = own.with_small_sizes(lender)
    # lent: the rows below 1 MB only (1000, 4000; not 2 MB), no cast rows (collectives only)
    assert t.sizes("x", "allreduce") == [1000, 4000, 1e6, 4e6] and not t.has("x", "cast")
    assert t.borrowed == {("x", "allreduce"): (1e6, "lend.csv", [1000, 4000])}
    # 2000 bytes: halfway in log2 between 1000 and 4000 -> alpha 3 us, busbw 1.5 GB/s (2 ranks: factor 1)
    assert t.time("x", "allreduce", 2000, 2) == pytest.approx(3e-6 + 2000 / 1.5e9)
    # 63246 bytes = sqrt(4000 x 1e6): halfway between the lender's 4000 row and the own 1 MB row
    mid = (4000 * 1e6) ** 0.5
    assert t.time("x", "allreduce", mid, 2) == pytest.approx(12e-6 + mid / 6e9)
    assert t.time("x", "allreduce", 500, 2) == pytest.approx(2e-6 + 500 / 1e9)       # held below the 1000 row
    assert t.time("x", "allreduce", 1e6, 2) == pytest.approx(20e-6 + 1e6 / 10e9)     # own rows unchanged
    assert t.time("x", "reducescatter", 2000, 4) == pytest.approx(3e-6 + 2000 * 0.75 / 1.5e9)
    assert t.borrowed_used == {("x", "allreduce")}
    assert any("priced from the rows at 1000, 4000 bytes of lend.csv" in n for n in t.notes)
    t.clear_used()
    assert not t.borrowed_used and not t.held_used
    # the CSV names the lender in comment lines and reads back to the same curve
    csv = t.to_csv()
    assert "# x allreduce below 1000000 bytes: rows of lend.csv" in csv and "# x allreduce from 1000000 bytes" in csv
    assert parse_table(csv, "back").time("x", "allreduce", mid, 2) == pytest.approx(12e-6 + mid / 6e9)


# vit_micro's one bucket under PowerSGD rank 1: the uncompressed part, P and Q (predict_model)
PSGD_CALLS = (1012, 500, 544)


def test_validate_lends_small_sizes_of_the_same_machine(tmp_path):
    assert [4 * powersgd_bucket(b)[k] for b in assign_buckets(vit_parameters("vit_micro"), 25, 1)
            for k in ("uncompressed", "p", "q")] == list(PSGD_CALLS)

    def folders(lender_gpu):
        a, b = tmp_path / lender_gpu.replace(" ", "-") / "a", tmp_path / lender_gpu.replace(" ", "-") / "b"
        a.mkdir(parents=True)
        b.mkdir()
        # folder a measured 1012 bytes in 10 us and 4048 in 16 us: fit alpha 8 us, busbw 0.506 GB/s;
        # rows (curve_rows, alpha at most half the time): 1012: 5 us, 0.2024 GB/s; 4048: 8 us, 0.506 GB/s
        write_micro_run(a / "b25.h5", start=0.04, end=0.040016, sent=4048, gpu=lender_gpu)
        write_micro_run(a / "small.h5", start=0.04, end=0.04001, sent=1012, gpu=lender_gpu)
        # folder b measured one size, 6816 bytes in 40 us (alpha 0), and a PowerSGD run of 3 small calls
        write_micro_run(b / "b25.h5", start=0.04, end=0.04004)
        write_micro_run(b / "psgd.h5", compression="powersgd")
        return [str(a), str(b)]

    rows, tables, _ = validate(folders("NVIDIA H200"), str(tmp_path))
    psgd = next(r for r in rows if r["run"] == "psgd")
    # the one bucket is ready at the end of backward: exposed = its calls; 1012 is the lent row itself,
    # 500 and 544 are below it (held at its alpha and busbw)
    lent = 10e-6 + (5e-6 + 500 / 0.2024e9) + (5e-6 + 544 / 0.2024e9)
    assert psgd["exposed_predicted"] == pytest.approx(lent, rel=1e-6)
    assert len(psgd["small_calls"]) == 1 and "rows at 1012, 4048 bytes of %s" % rows[0]["origin"] in psgd["small_calls"][0]
    table_b = next(t for k, t in tables.items() if k[0].endswith("b"))
    assert table_b.sizes("nvlink", "allreduce") == [1012, 4048, 6816]
    # the lender's own predictions and the reference's are unchanged: nothing of theirs below its rows
    assert all(not r["small_calls"] for r in rows if r["run"] != "psgd")
    # another GPU: nothing lent; the calls take the 6816-byte row (alpha 0, 6816 bytes in 40 us)
    rows, _, _ = validate(folders("NVIDIA H100"), str(tmp_path))
    psgd = next(r for r in rows if r["run"] == "psgd")
    assert psgd["exposed_predicted"] == pytest.approx(sum(PSGD_CALLS) * 40e-6 / MICRO_BYTES, rel=1e-6)
    assert "at that row's alpha and busbw: no group of the same transport and machine" in psgd["small_calls"][0]


def test_machine_of(tmp_path):
    with Run(write_micro_run(tmp_path / "a.h5")) as r:
        assert machine_of(r) == (("NVIDIA H200",), "NCCL 2.28.3", ("P2P [P2P/CUMEM]",), 2)
    path = write_micro_run(tmp_path / "old.h5")
    with h5py.File(path, "a") as f:
        del f.attrs["device_names"]
    with Run(path) as r:
        assert machine_of(r) is None  # no GPU names recorded: never the same machine as another


def test_cli_small_link_table(tmp_path, capsys):
    ref_path = write_micro_run(tmp_path / "ref.h5")
    own, small = tmp_path / "own.csv", tmp_path / "small.csv"
    own.write_text("transport,collective,bytes,alpha_us,busbw_GBps\nnvlink,allreduce,4096,20,1\n")
    # rows at the three PowerSGD call sizes, each 2 us + bytes / busbw = 2 us: 4, 4, 5 us in all
    small.write_text("transport,collective,bytes,alpha_us,busbw_GBps\nnvlink,allreduce,500,2,0.25\n"
                     "nvlink,allreduce,544,2,0.272\nnvlink,allreduce,1012,3,0.506\nnvlink,allreduce,8192,1,1\n")
    args = ["predict", ref_path, "--link-table", str(own), "--compression", "powersgd", "--json"]
    assert report.main(args) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["exposed_comm_s"] == pytest.approx(3 * 20e-6 + sum(PSGD_CALLS) / 1e9)  # the 4096 row held
    assert any("calls below 4096 bytes, the table's smallest row" in a and "--small-link-table" in a
               for a in d["assumptions"])
    assert report.main(args + ["--small-link-table", str(small)]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["exposed_comm_s"] == pytest.approx(13e-6)
    assert any("priced from the rows at 500, 544, 1012 bytes of %s" % small in a for a in d["assumptions"])
    assert report.main(args + ["--small-link-table", str(tmp_path / "no.csv")]) == 2
    assert "--small-link-table %s" % (tmp_path / "no.csv") in capsys.readouterr().err


def test_link_table_values_must_be_finite_and_every_column_filled():
    head = "transport,collective,alpha_us,busbw_GBps\n"
    for row, want in (("x,allreduce,nan,1\n", "finite"), ("x,allreduce,inf,1\n", "finite"),
                      ("x,allreduce,1,1e-300\n", ">= 1e-9"), ("x,allreduce,1,inf\n", "finite"),
                      ("x,allreduce,,1\n", "no value in column alpha_us")):
        with pytest.raises(ResultsError, match="data row 1: .*" + want):
            parse_table(head + row, "bad.csv")
