"""vitddp-report predict with the copy-engine all-reduce (predict_ce): the shared-copy-engine
schedule on several comm streams, the split of measured intervals into alone and shared time, the
concurrency gain fitted from runs on one and on two streams, and whole predictions and a validation
on hand-made results files. Every expected value is worked out by hand in the comments."""
import h5py
import numpy as np
import pytest

from vitddp_tools import report
from vitddp_tools.predict import fit_link_table
from vitddp_tools.predict_ce import (RunShares, comm_streams_of, fit_gain, gain_rows, overlap_split, shared_schedule,
                                     work_inside)
from vitddp_tools.predict_core import Baseline, Reference, Scenario, predict, schedule
from vitddp_tools.predict_link import parse_table
from vitddp_tools.reader import ResultsError, Run

CE = "copy-engine (CUDA IPC peer-to-peer copies, %d comm stream%s; NCCL: none)"


def write_ce_run(path, intervals, bucket_bytes, world_size=2, streams=2, backward=0.05, precision="fp32",
                 options=None, transport=None, sps=None, compress=None):
    """A vit_micro results file (docs/schema.md) of the copy-engine all-reduce: input wait 0.001 s,
    forward 0.019 s (backward starts 0.02 s into the step), `backward`, optimizer 0.01 s, 4 steps of
    which steps 1 and 2 are timed; bucket j's comm work over intervals[j] = (start, end) seconds after
    backward starts, its allreduce_time the interval's length, or with `compress` (seconds per
    bucket: its compress_time, else 0) the rest of it; steps/s such that the host adds 1 ms.
    `transport`: nccl_transport (default: the copy-engine string with `streams`)."""
    R, S, B = world_size, 4, len(bucket_bytes)
    step = 0.001 + 0.019 + backward + 0.01
    tr = transport if transport is not None else (CE % (streams, "" if streams == 1 else "s") if R > 1 else "none (no DDP)")
    with h5py.File(path, "w") as f:
        for k, v in {"model": "vit_micro", "world_size": R, "batch_size": 8, "backend": "gpu", "precision": precision,
                     "compression": "none", "ddp": int(R > 1), "overlap": 1, "num_buckets": B,
                     "nccl_transport": np.array([tr] * R, dtype=h5py.string_dtype())}.items():
            f.attrs[k] = v
        opts = {"bucket-cap-mb": "25", "first-bucket-mb": "1", "grad-accum-steps": "1", "compression": "none",
                "num-classes": "0", "allreduce": "copy-engine", "comm-streams": str(streams), "grad-as-bucket-view": "on"}
        opts.update(options or {})
        for k, v in opts.items():
            f.attrs["option." + k] = v
        for name, v in (("input_wait", 0.001), ("forward", 0.019), ("backward", backward), ("optimizer", 0.01),
                        ("exposed_comm", 0.0), ("step_time", step)):
            f["timing/" + name] = np.full((R, S), v)
        f["steps/timed"] = np.array([[0, 1, 1, 0]], dtype=np.int64)
        f["buckets/bytes"] = np.asarray(bucket_bytes, dtype=np.int64)
        iv = np.asarray(intervals, dtype=float)
        f["buckets/allreduce_start"] = np.broadcast_to(0.02 + iv[:, 0], (R, S, B)).copy()
        f["buckets/allreduce_end"] = np.broadcast_to(0.02 + iv[:, 1], (R, S, B)).copy()
        comp = np.zeros(B) if compress is None else np.asarray(compress, dtype=float)
        f["buckets/allreduce_time"] = np.broadcast_to(iv[:, 1] - iv[:, 0] - comp, (R, S, B)).copy()
        f["buckets/compress_time"] = np.broadcast_to(comp, (R, S, B)).copy()
        f["buckets/bytes_sent"] = np.broadcast_to(np.asarray(bucket_bytes, dtype=np.int64) * (R > 1), (R, S, B)).copy()
        f["summary/steps_per_second"] = float(sps or 1.0 / (step + 0.001))
    return str(path)


def test_one_stream_is_the_single_stream_schedule():
    ready, work = [0.0, 1.0, 5.0, 5.5], [2.0, 1.0, 1.0, 0.25]
    # as test_predict's schedule by hand: bucket 1 waits for 0, bucket 2 finds the stream idle, 3 waits for 2
    for gain in (1.0, 1.7):
        start, end = shared_schedule(ready, work, 1, gain)
        assert start.tolist() == [0.0, 2.0, 5.0, 6.0] and end.tolist() == [2.0, 3.0, 6.0, 6.25]
    assert np.allclose(shared_schedule(ready, work, 1)[1], schedule(ready, work)[1])


def test_two_streams_share_the_copy_engines_by_hand():
    # gain 1: two buckets of 1 s together progress at 1/2 each and both end at 2 s
    start, end = shared_schedule([0.0, 0.0], [1.0, 1.0], 2, 1.0)
    assert start.tolist() == [0.0, 0.0] and end == pytest.approx([2.0, 2.0])
    # gain 1.5: bucket 0 alone for 0.5 s (0.5 left); then each at 0.75: bucket 0 ends 0.5 + 0.5 / 0.75 = 7/6,
    # bucket 1 has done 0.5 by then and runs its other 0.5 alone: ends 7/6 + 0.5 = 5/3
    start, end = shared_schedule([0.0, 0.5], [1.0, 1.0], 2, 1.5)
    assert start.tolist() == [0.0, 0.5] and end == pytest.approx([7 / 6, 5 / 3])
    # stream order: bucket 2 is on stream 0 behind bucket 0 (both streams busy until 2 s), then alone for 1 s
    start, end = shared_schedule([0.0, 0.0, 0.0], [1.0, 1.0, 1.0], 2, 1.0)
    assert start == pytest.approx([0.0, 0.0, 2.0]) and end == pytest.approx([2.0, 2.0, 3.0])
    # per-bucket gain [2, 1]: bucket 0 at 2/2 = 1 ends at 1 s; bucket 1 at 1/2 has done 0.5 of 2, then 1.5 alone
    start, end = shared_schedule([0.0, 0.0], [1.0, 2.0], 2, [2.0, 1.0])
    assert end == pytest.approx([1.0, 2.5])
    # three streams, gain 1.2: three buckets of 0.4 s each progress at 0.4 and end together at 1 s
    assert shared_schedule([0.0] * 3, [0.4] * 3, 3, 1.2)[1] == pytest.approx([1.0, 1.0, 1.0])
    # a bucket without work ends where it starts and never slows the other
    start, end = shared_schedule([0.0, 1.0], [0.0, 1.0], 2, 1.0)
    assert start.tolist() == [0.0, 1.0] and end.tolist() == [0.0, 2.0]


def test_overlap_split_and_work_inside_by_hand():
    # [0, 2] and [1, 3]: each is alone for 1 s and shares 1 s with the other (counted 1/2)
    alone, shared = overlap_split(np.array([[0.0, 1.0]]), np.array([[2.0, 3.0]]))
    assert alone.tolist() == [[1.0, 1.0]] and shared.tolist() == [[0.5, 0.5]]
    # inside [0, 1.5]: bucket 0 alone 1 s and shared 0.5 s (0.25); bucket 1 only shared 0.5 s (0.25)
    alone, shared = overlap_split(np.array([[0.0, 1.0]]), np.array([[2.0, 3.0]]), 1.5)
    assert alone[0] == pytest.approx([1.0, 0.0]) and shared[0] == pytest.approx([0.25, 0.25])
    # apart: all alone; leading axes kept ([2 ranks, 1 step, 2 buckets])
    alone, shared = overlap_split(np.array([[[0.0, 2.0]], [[0.0, 2.0]]]), np.array([[[1.0, 3.0]], [[1.0, 3.0]]]))
    assert alone.shape == (2, 1, 2) and alone.tolist() == [[[1.0, 1.0]], [[1.0, 1.0]]] and not shared.any()
    # the gain-1.5 schedule above: bucket 0 [0, 7/6] alone 0.5 + shared (7/6 - 0.5) / 2 = 1/3 -> 0.5 + 1.5 / 3 = 1
    # (its work); inside [0, 1]: bucket 0 did 0.5 + 0.5 x 0.75, bucket 1 0.5 x 0.75 -> 1.25 in all
    start, end = np.array([0.0, 0.5]), np.array([7 / 6, 5 / 3])
    alone, shared = overlap_split(start, end)
    assert alone + 1.5 * shared == pytest.approx([1.0, 1.0])
    assert work_inside(start, end, 1.0, 1.5) == pytest.approx(1.25)
    assert work_inside(start, end, 1.0, 1.0) == pytest.approx(0.5 + 0.5)  # gain 1: the union of busy time


def write_old_build(path, intervals, bucket_bytes, **kw):
    """A copy-engine file as builds before --comm-streams wrote it: no count in nccl_transport and no
    option.comm-streams."""
    write_ce_run(path, intervals, bucket_bytes, transport="copy-engine (CUDA IPC peer-to-peer copies; NCCL: none)", **kw)
    with h5py.File(path, "a") as f:
        del f.attrs["option.comm-streams"]
    return path


def test_comm_streams_of_files(tmp_path):
    iv, nb = [(0.0, 0.01)], [6816]
    with Run(write_ce_run(tmp_path / "two.h5", iv, nb, streams=2)) as r:
        assert comm_streams_of(r) == 2
    with Run(write_ce_run(tmp_path / "one.h5", iv, nb, streams=1)) as r:
        assert comm_streams_of(r) == 1
    with Run(write_ce_run(tmp_path / "nccl.h5", iv, nb, transport="P2P [P2P/CUMEM]",
                          options={"allreduce": "nccl"})) as r:
        assert comm_streams_of(r) == 1
    old = write_old_build(tmp_path / "old.h5", iv, nb)
    with Run(old) as r:
        with pytest.raises(ResultsError, match="old.h5: --allreduce copy-engine without a comm-stream count"):
            comm_streams_of(r)
        with pytest.raises(ResultsError, match="comm-stream count"):
            Reference.from_run(r)


# Three equal buckets of 2000 bytes. On two streams: b0 [0, 20 ms], b1 [10, 30], b2 [20, 40] (b2 behind b0
# on stream 0): b0 alone 10 ms + shared 10 ms with b1 (5); b1 shared with b0 then with b2 (5 + 5); b2
# shared 5 + alone 10. On one stream each takes 16 ms. Least squares over the three:
# G = sum shared (16 - alone) / sum shared^2 = (5 x 6 + 10 x 16 + 5 x 6) / (25 + 100 + 25) = 220 / 150.
TWO = [(0.0, 0.02), (0.01, 0.03), (0.02, 0.04)]
ONE = [(0.0, 0.016), (0.016, 0.032), (0.032, 0.048)]
G_HAND = 220 / 150


def test_fit_gain_by_hand(tmp_path):
    with Run(write_ce_run(tmp_path / "two.h5", TWO, [2000] * 3)) as r:
        two = RunShares.from_run(r)
    with Run(write_ce_run(tmp_path / "one.h5", ONE, [2000] * 3, streams=1)) as r:
        one = RunShares.from_run(r)
    assert two.alone[0, 0] == pytest.approx([0.01, 0.0, 0.01]) and two.shared[0, 0] == pytest.approx([0.005, 0.01, 0.005])
    [(nbytes, g, points)] = fit_gain([two, one])
    assert nbytes == 2000 and g == pytest.approx(G_HAND) and points == 3
    assert fit_gain([two, one], comparable=lambda a, b: False) == []   # no comparable pair
    assert fit_gain([two]) == [] and fit_gain([two, one], min_points=4) == []
    # alone-equivalent allreduce times at G: 10 + G 5, G 10, 10 + G 5 ms (allreduce_time = the interval)
    want = [0.01 + G_HAND * 0.005, G_HAND * 0.01, 0.01 + G_HAND * 0.005]
    assert two.scaled("allreduce", G_HAND)[0, 0] == pytest.approx(want)
    assert one.scaled("allreduce", G_HAND)[0, 0] == pytest.approx([0.016] * 3)  # one stream: as measured


def test_fit_link_table_with_concurrency_rows(tmp_path):
    runs = [Run(write_ce_run(tmp_path / "two.h5", TWO, [2000] * 3)),
            Run(write_ce_run(tmp_path / "one.h5", ONE, [2000] * 3, streams=1)),
            # same payloads on two streams with bucket copies: an unmodelled option, no pair for the gain
            Run(write_ce_run(tmp_path / "copy.h5", [(0.0, 0.05), (0.0, 0.05), (0.0, 0.05)], [2000] * 3,
                             options={"grad-as-bucket-view": "off"}))]
    try:
        t = fit_link_table(runs[:2], "t")
        assert t.gain("copy-engine", 2000) == pytest.approx(G_HAND) and t.gain("nvlink", 2000) == 1.0
        # allreduce points: 16, 16, 16 ms (one stream) and 10 + 5G, 10G, 10 + 5G ms; one size, alpha 0,
        # busbw from their median: 16 ms, as 5G + 10 = 17.3 > 16 > 10G = 14.7
        assert t.time("copy-engine", "allreduce", 2000, 2) == pytest.approx(0.016)
        assert fit_link_table(runs, "t").gain("copy-engine", 2000) == pytest.approx(G_HAND)
        alone = fit_link_table(runs[:1], "t")
        assert not alone.has("copy-engine", "concurrency") and any("G = 1" in n for n in alone.notes)
    finally:
        for r in runs:
            r.close()


def test_no_concurrency_row_where_the_fit_is_not_positive(tmp_path):
    # the one-stream buckets take 4 ms: one - alone = 4 - 10, 4 - 0, 4 - 10 ms against shared 5, 10, 5 ms:
    # G = (5 x -6 + 10 x 4 + 5 x -6) / 150 = -20 / 150 - the buckets took longer on two streams even alone
    fast = [(0.0, 0.004), (0.004, 0.008), (0.008, 0.012)]
    runs = [Run(write_ce_run(tmp_path / "two.h5", TWO, [2000] * 3)),
            Run(write_ce_run(tmp_path / "one.h5", fast, [2000] * 3, streams=1))]
    try:
        shares = [RunShares.from_run(r) for r in runs]
        [(nbytes, g, points)] = fit_gain(shares)
        assert nbytes == 2000 and g == pytest.approx(-20 / 150) and points == 3
        rows, notes = gain_rows([(2000.0, -20 / 150, 3), (8000.0, 1.25, 4)], "t")
        assert [(r.nbytes, r.busbw_gbps) for r in rows] == [(8000.0, 1.25)]
        assert notes == ["t: no concurrency row at 2000 bytes: the least-squares G of its 3 buckets is -0.13 (they "
                         "took longer on several comm streams than on one even while alone, which sharing the copy "
                         "engines does not explain); G there from the other sizes' rows"]
        t = fit_link_table(runs, "t")
        assert not t.has("copy-engine", "concurrency") and t.gain("copy-engine", 2000) == 1.0
        assert t.notes == notes[:1]   # not the note of a table without any pair
    finally:
        for r in runs:
            r.close()


# The casts' own cost on backward by hand. Reference on one stream: bucket 0 over [10, 30] ms, bucket 1 over
# [30, 40] ms of a 50 ms backward (30 ms of comm work inside it); 1-GPU backward 40 ms -> k = 10 / 30 = 1/3.
# A bf16 run over the same intervals, half of each bucket's time its compress_time (cast_frac 0.5, 0.5), 55 ms
# backward: casts C = 15 ms, the rest A = 15 ms inside backward -> s = (55 - 40 - 15 / 3) / 15 = 2/3.
CAST_IV = [(0.01, 0.03), (0.03, 0.04)]


def test_fit_cast_cost_by_hand(tmp_path):
    from vitddp_tools.predict import cast_references
    from vitddp_tools.predict_core import fit_cast_cost
    bf16 = {"compression": "bf16"}
    files = [write_ce_run(tmp_path / "ref.h5", CAST_IV, [4224, 2592], streams=1),
             write_ce_run(tmp_path / "c16.h5", CAST_IV, [4224, 2592], streams=1, backward=0.055, options=bf16,
                          compress=[0.01, 0.005]),
             # an unmodelled option: not a measure of the casts' cost
             write_ce_run(tmp_path / "copy.h5", CAST_IV, [4224, 2592], streams=1, backward=0.09, compress=[0.01, 0.005],
                          options=dict(bf16, **{"grad-as-bucket-view": "off"}))]
    runs = [Run(f) for f in files]
    try:
        with Run(write_ce_run(tmp_path / "one.h5", [(0.0, 0.0)], [0], world_size=1, backward=0.04)) as r:
            base = Baseline.from_run(r)
        ref = Reference.from_run(runs[0])
        casts = cast_references(runs, ref)
        assert [c[0] for c in casts] == ["c16"] and casts[0][1].cast_frac == pytest.approx([0.5, 0.5])
        table = ce_table(gain=False)
        cost = fit_cast_cost(ref, base, casts, table)
        assert cost.per_second == pytest.approx(2 / 3) and cost.k == pytest.approx(1 / 3) and cost.runs == ["c16"]
        assert fit_cast_cost(ref, None, casts, table) is None and fit_cast_cost(ref, base, [], table) is None
        assert fit_cast_cost(casts[0][1], base, casts, table) is None        # a reference that cast itself
        nccl = Reference.from_run(runs[0])
        nccl.transport = "nvlink"
        assert fit_cast_cost(nccl, base, casts, table) is None               # NCCL's kernels: k holds for the casts
    finally:
        for r in runs:
            r.close()
    # predicted in bf16 with a bucket of 3 ms of all-reduce and 1 ms of cast (f = 1/4), ready at 0.2 of backward
    # and done inside it (bucket 1 is ready at its end): backward = 40 ms + (k x 3/4 + s x 1/4) x 4 ms
    bw, cbw = 2112 / 0.003 / 1e9, 4224 / 0.001 / 1e9
    table = parse_table("transport,collective,bytes,alpha_us,busbw_GBps\ncopy-engine,allreduce,,0,%r\n"
                        "copy-engine,cast,,0,%r\n" % (bw, cbw), "t")
    sc = Scenario(ranks=2, transport="copy-engine", cap_mb=CAP, first_mb=CAP, compression="bf16")
    p = predict(ref, sc, table, base, cost)
    assert p.backward == pytest.approx(0.04 + (0.75 / 3 + 0.25 * 2 / 3) * 0.004)
    assert any("s = 0.667 per second of cast work inside backward (k = 0.333 for the rest of the comm work), from c16"
               in a for a in p.assumptions)
    p = predict(ref, sc, table, base)                                        # without one the casts cost k
    assert p.backward == pytest.approx(0.04 + 0.004 / 3)
    assert any("k = 0.333 per second of them" in a and "no run with that compression" in a for a in p.assumptions)


def test_validate_names_the_casts_cost(tmp_path):
    # as above, and a second bf16 run with 58 ms of backward: y = 58 - 40 - 5 = 13 ms against C = 15 ms, so
    # s = 15 (10 + 13) / (2 x 15^2) = 23/30 from both; leave one out, each from the other: 13/15 and 10/15
    d = tmp_path / "runs"
    d.mkdir()
    write_ce_run(d / "ref.h5", CAST_IV, [4224, 2592], streams=1)
    for name, bwd in (("c16", 0.055), ("c16b", 0.058)):
        write_ce_run(d / (name + ".h5"), CAST_IV, [4224, 2592], streams=1, backward=bwd,
                     options={"compression": "bf16"}, compress=[0.01, 0.005])
    write_ce_run(d / "solo.h5", [(0.0, 0.0)], [0], world_size=1, backward=0.04)
    line = "The casts' cost on backward of %s: s = %.3f per second of cast work inside backward (k = 0.333 for the " \
           "rest of the comm work), from %s."
    out = tmp_path / "v.md"
    assert report.main(["predict", "--validate", str(d), "-o", str(out)]) == 0
    assert line % ("c16, c16b", 23 / 30, "c16, c16b") in out.read_text()
    assert report.main(["predict", "--validate", str(d), "--leave-one-out", "-o", str(out)]) == 0
    text = out.read_text()
    assert line % ("c16", 13 / 15, "c16b") in text and line % ("c16b", 10 / 15, "c16") in text


# A prediction by hand: vit_micro in buckets of 0.004 MiB (4194 bytes) gives two buckets, 4224 and 2592 bytes
# (1056 and 648 fp32 elements, 6816 in all). Reference on two streams: bucket 0 over [10, 30] ms of a 50 ms
# backward, bucket 1 over [20, 40]; both found their stream idle, so bucket 0 (4224 bytes) was ready at
# 10 / 50 = 0.2 of backward. Under gain 1.5 its comm work inside backward: alone 10 + 10 ms, shared
# 2 x 5 ms -> 20 + 1.5 x 10 = 35 ms; 1-GPU backward 40 ms -> k = 10 / 35.
CAP = 4194.304 / 2 ** 20
W0 = 0.005                       # link table: bucket 0 takes 5 ms alone ...
BW = 4224 / W0 / 1e9             # ... so busbw 4224 bytes / 5 ms (2 ranks: factor 1)
W1 = 2592 / (BW * 1e9)           # bucket 1: 3.068 ms alone


def ce_table(gain=True):
    return parse_table("transport,collective,bytes,alpha_us,busbw_GBps\ncopy-engine,allreduce,,0,%r\n%s" % (
        BW, "copy-engine,concurrency,,0,1.5\n" if gain else ""), "t")


def test_copy_engine_prediction_by_hand(tmp_path):
    with Run(write_ce_run(tmp_path / "ref.h5", [(0.01, 0.03), (0.02, 0.04)], [4224, 2592])) as r:
        ref = Reference.from_run(r)
    with Run(write_ce_run(tmp_path / "one.h5", [(0.0, 0.0)], [0], world_size=1, backward=0.04)) as r:
        base = Baseline.from_run(r)
    assert ref.comm_streams == 2 and ref.transport == "copy-engine"
    assert ref.ready_bytes.tolist() == [0.0, 4224.0, 6816.0] and ref.ready_frac == pytest.approx([0.0, 0.2, 1.0])
    assert ref.busy_in_backward == pytest.approx(0.04) and ref.work_in_backward(1.5) == pytest.approx(0.035)
    sc = dict(ranks=2, transport="copy-engine", cap_mb=CAP, first_mb=CAP)
    # overlapped, two streams: bucket 0 ready at 0.2 of backward, alone, done inside it -> backward =
    # 40 ms + (10 / 35) x 5 ms; bucket 1 ready at the end, alone on the other stream: exposed = W1
    p = predict(ref, Scenario(comm_streams=2, **sc), ce_table(), base)
    bwd = 0.04 + 0.01 / 0.035 * W0
    assert p.buckets == 2 and p.backward == pytest.approx(bwd) and p.exposed == pytest.approx(W1)
    assert p.start == pytest.approx([0.2 * bwd, bwd]) and p.step == pytest.approx(0.02 + bwd + W1 + 0.01 + 0.001)
    assert any("j mod 2" in a for a in p.assumptions) and any("G 1.500" in a for a in p.assumptions)
    # no overlap: both start at the end of backward (40 ms, nothing inside it) and share the engines at
    # 0.75 each: bucket 1 ends after W1 / 0.75, bucket 0 then runs its remaining W0 - W1 alone
    p = predict(ref, Scenario(comm_streams=2, overlap=False, **sc), ce_table(), base)
    assert p.backward == pytest.approx(0.04) and p.exposed == pytest.approx(W1 / 0.75 + W0 - W1)
    # one stream: one after the other; without a concurrency row two streams gain nothing either
    one = predict(ref, Scenario(comm_streams=1, overlap=False, **sc), ce_table(), base)
    assert one.exposed == pytest.approx(W0 + W1)
    g1 = predict(ref, Scenario(comm_streams=2, overlap=False, **sc), ce_table(gain=False), base)
    assert g1.exposed == pytest.approx(W0 + W1) and any("G = 1" in a for a in g1.assumptions)
    with pytest.raises(ResultsError, match="--comm-streams 2 with transport nvlink"):
        predict(ref, Scenario(ranks=2, transport="nvlink", cap_mb=25, comm_streams=2), ce_table(), base)
    with pytest.raises(ResultsError, match="--comm-streams must be in"):
        predict(ref, Scenario(comm_streams=5, **sc), ce_table(), base)
    with pytest.raises(ResultsError, match="powersgd with transport copy-engine"):
        predict(ref, Scenario(comm_streams=1, compression="powersgd", **sc), ce_table(), base)


def test_cli_comm_streams(tmp_path, capsys):
    import json
    ref = write_ce_run(tmp_path / "ref.h5", [(0.01, 0.03), (0.02, 0.04)], [4224, 2592])
    tab = tmp_path / "t.csv"
    tab.write_text(ce_table().to_csv())
    args = ["predict", ref, "--link-table", str(tab), "--bucket-cap-mb", repr(CAP), "--first-bucket-mb", repr(CAP),
            "--no-overlap", "--json"]

    def run(*extra):
        assert report.main(args + list(extra)) == 0
        return json.loads(capsys.readouterr().out)
    d = run()                                   # the reference's explicit --comm-streams 2
    assert d["scenario"]["comm_streams"] == 2 and d["exposed_comm_s"] == pytest.approx(W1 / 0.75 + W0 - W1)
    assert run("--comm-streams", "1")["exposed_comm_s"] == pytest.approx(W0 + W1)
    assert run("--comm-streams", "auto")["scenario"]["comm_streams"] == 1   # vitddp's rule: fp32 -> 1
    assert report.main(args + ["--comm-streams", "two"]) == 2
    assert "--comm-streams: expected auto or an integer in [1, 4], got 'two'" in capsys.readouterr().err
    bf16 = write_ce_run(tmp_path / "bf16.h5", [(0.01, 0.03), (0.02, 0.04)], [4224, 2592], precision="bf16",
                        options={"comm-streams": "auto"})
    args[1] = bf16
    assert run()["scenario"]["comm_streams"] == 2            # auto under bf16 without compression
    assert run("--compression", "bf16")["scenario"]["comm_streams"] == 1


def test_validate_copy_engine_runs(tmp_path):
    d = tmp_path / "runs"
    d.mkdir()
    write_ce_run(d / "two.h5", TWO, [2000] * 3)
    write_ce_run(d / "one.h5", ONE, [2000] * 3, streams=1, options={"bucket-cap-mb": "12"})
    write_old_build(d / "old.h5", ONE, [2000] * 3)
    write_ce_run(d / "solo.h5", [(0.0, 0.0)], [0], world_size=1, backward=0.04)
    out = tmp_path / "v.md"
    assert report.main(["predict", "--validate", str(d), "-o", str(out)]) == 0
    text = out.read_text()
    assert ": copy-engine, copy-engine, fp32 (reference two, baseline solo)" in text
    assert "| two **ref** | 25 | none, 2 comm streams |" in text and "| one | 12 | none, 1 comm stream |" in text
    assert "| copy-engine | 5% | 2 |" in text
    assert "copy-engine,concurrency,2000,0.000,1.467" in text
    assert "does not record its comm-stream count" in text and "(1 run: old)" in text


def test_comm_streams_of_builds_without_the_count(tmp_path):
    iv, nb, old = [(0.0, 0.01)], [6816], "copy-engine (CUDA IPC peer-to-peer copies; NCCL: none)"
    # a build with --comm-streams whose nccl_transport names no count: the file's own integer option
    with Run(write_ce_run(tmp_path / "opt.h5", iv, nb, streams=3, transport=old)) as r:
        assert comm_streams_of(r) == 3
        r.stated_comm_streams = 1  # the file's own record wins over a stated count
        assert comm_streams_of(r) == 3
    with Run(write_ce_run(tmp_path / "auto.h5", iv, nb, transport=old, options={"comm-streams": "auto"})) as r:
        with pytest.raises(ResultsError, match="auto.h5: --allreduce copy-engine without a comm-stream count"):
            comm_streams_of(r)
    with Run(write_old_build(tmp_path / "old.h5", iv, nb)) as r:
        r.stated_comm_streams = 4
        assert comm_streams_of(r) == 4


def test_load_stream_table(tmp_path):
    from vitddp_tools.predict import _stated, load_stream_table
    p = tmp_path / "s.csv"
    p.write_text("# comment\nfolder,run,comm_streams,unmodelled,evidence\n"
                 "runs/a,*,1,,one stream in that build\nruns/a,x,3,,set by the script\n"
                 "runs/b/,pipe,-,,another schedule\n")
    t = load_stream_table(str(p))
    assert _stated(t, "runs/a", "x") == (3, "", "set by the script")
    assert _stated(t, "runs/a/", "y") == (1, "", "one stream in that build")  # the folder's * row
    assert _stated(t, "runs/b", "pipe") == (None, "", "another schedule")
    assert _stated(t, "runs/b", "other") is None
    for body, msg in (("folder,run,streams\n", "expected the header"),
                      ("folder,run,comm_streams,unmodelled,evidence\nruns/a,x,5,,why\n", "line 2: expected"),
                      ("folder,run,comm_streams,unmodelled,evidence\nruns/a,x,2,,\n", "line 2: expected")):
        p.write_text(body)
        with pytest.raises(ResultsError, match="--comm-streams-table .*: " + msg):
            load_stream_table(str(p))
    with pytest.raises(ResultsError, match="cannot read"):
        load_stream_table(str(tmp_path / "missing.csv"))


def test_validate_with_stated_comm_streams(tmp_path):
    d = tmp_path / "runs"
    d.mkdir()
    write_ce_run(d / "two.h5", TWO, [2000] * 3)
    write_ce_run(d / "one.h5", ONE, [2000] * 3, streams=1, options={"bucket-cap-mb": "12"})
    # the same run as `one`, from a build that recorded no count: stated 1 stream it is `one` again
    write_old_build(d / "old.h5", ONE, [2000] * 3, options={"bucket-cap-mb": "12"})
    write_old_build(d / "pipe.h5", ONE, [2000] * 3, options={"bucket-cap-mb": "12"})
    write_ce_run(d / "solo.h5", [(0.0, 0.0)], [0], world_size=1, backward=0.04)
    table = tmp_path / "s.csv"
    table.write_text("folder,run,comm_streams,unmodelled,evidence\n%s,old,1,older casts,one stream then\n"
                     "%s,pipe,-,,copies and sums on two streams\n" % (d, d))
    out = tmp_path / "v.md"
    assert report.main(["predict", "--validate", str(d), "--comm-streams-table", str(table), "-o", str(out)]) == 0
    text = out.read_text()
    rows = {l.split(" | ")[0][2:]: l.split(" | ")[1:] for l in text.splitlines() if l.startswith("| one |")
            or l.startswith("| old |")}
    # identical inputs: the same prediction; old's unmodelled text keeps it out of the targets (2 runs)
    assert rows["old"][:-1] == rows["one"][:-1] and rows["old"][-1] == "older casts |"
    assert "| old | 12 | none, 1 comm stream |" in text and "| copy-engine | 5% | 2 |" in text
    # the duplicated pair leaves the least-squares gain as it was: sum b y / sum b^2 over the same points twice
    assert "copy-engine,concurrency,2000,0.000,1.467" in text
    assert "copies and sums on two streams (--comm-streams-table); not predicted (1 run: pipe)" in text
    assert "--comm-streams-table %s" % table in text
