"""nccl-tests' algbw/busbw of the bucket all-reduces against values computed by hand.

nccl-tests doc/PERFORMANCE.md: algbw = bytes / time; busbw = algbw x 2(n-1)/n for all-reduce,
x (n-1)/n for reduce-scatter and all-gather; GB/s = 1e9 bytes/s."""
import numpy as np
import pytest

from vitddp_tools.bandwidth import BucketBandwidth, bus_factor, per_rank_busbw
from vitddp_tools.reader import ResultsError, Run


def test_bus_factors():
    assert bus_factor(2) == 1.0
    assert bus_factor(4) == 1.5          # 2 x 3 / 4
    assert bus_factor(8) == 1.75         # 2 x 7 / 8
    assert bus_factor(4, "reducescatter") == 0.75
    assert bus_factor(8, "allgather") == 0.875
    assert bus_factor(1) == 0.0
    with pytest.raises(ValueError):
        bus_factor(0)


# 4 ranks, steps 0..2 (0 untimed), two buckets: 4e8 and 1e8 bytes on the wire.
# Step 1: bucket 0 takes 0.01 s on every rank, bucket 1 0.004/0.006/0.005/0.005 s (mean 0.005).
# Step 2: both twice as long. Step 0 (warm-up): 1 s each, which must not count.
TIMES = np.array([[[1.0, 1.0], [0.010, 0.004], [0.020, 0.008]],
                  [[1.0, 1.0], [0.010, 0.006], [0.020, 0.012]],
                  [[1.0, 1.0], [0.010, 0.005], [0.020, 0.010]],
                  [[1.0, 1.0], [0.010, 0.005], [0.020, 0.010]]])


def four_rank_file(make_run, **kw):
    return make_run("np4.h5", world_size=4, timed=(0, 1, 1), bucket_bytes=[400_000_000, 100_000_000],
                    allreduce_time=TIMES, **kw)


def test_per_bucket_and_step_by_hand(make_run):
    with Run(four_rank_file(make_run)) as run:
        bw = BucketBandwidth(run)
        # step 1: bucket 0 4e8 B / 0.01 s = 40 GB/s algbw, x 1.5 = 60 busbw; bucket 1 1e8 / 0.005 = 20 -> 30
        assert bw.algbw[1] == pytest.approx([40.0, 20.0])
        assert bw.busbw[1] == pytest.approx([60.0, 30.0])
        assert bw.busbw[2] == pytest.approx([30.0, 15.0])
        pb = bw.per_bucket()  # medians of the timed steps 1, 2
        assert pb["busbw"] == pytest.approx([45.0, 22.5])
        assert pb["nbytes"] == pytest.approx([4e8, 1e8])
        # whole step: 5e8 B / 0.015 s = 33.33 GB/s -> busbw 50; step 2: 25; median of the two: 37.5
        steps = bw.per_step()
        assert steps["busbw"][1:] == pytest.approx([50.0, 25.0])
        assert bw.median_busbw() == pytest.approx(37.5)
        assert bw.median_algbw() == pytest.approx(25.0)


def test_reduce_scattered_buckets_take_the_reduce_scatter_factor(make_run):
    # --shard-optimizer (ZeRO-1): the same bytes and times on 4 ranks, factor 3/4 instead of 3/2
    with Run(four_rank_file(make_run, reduce_scattered=1)) as run:
        bw = BucketBandwidth(run)
        assert bw.busbw[1] == pytest.approx([30.0, 15.0])  # 40 and 20 GB/s algbw x 0.75
        assert bw.median_busbw() == pytest.approx(18.75)  # 37.5 / 1.5 x 0.75
        assert per_rank_busbw(run)[0, 1] == pytest.approx([30.0, 0.75 * 1e8 / 0.004 / 1e9])
    with Run(four_rank_file(make_run, reduce_scattered=0)) as run:
        assert BucketBandwidth(run).median_busbw() == pytest.approx(37.5)  # all-reduces


def test_compressed_bucket_counts_its_16_bit_payload(make_run):
    # bf16: buckets/bytes_sent holds numel x 2, half of buckets/bytes (fp32 as all-reduced)
    path = make_run("bf16.h5", compression="bf16", bucket_bytes=[8_000_000], allreduce_time=np.full((2, 4, 1), 0.002))
    with Run(path) as run:
        bw = BucketBandwidth(run)
        assert bw.nbytes[1, 0] == 4_000_000
        assert bw.median_busbw() == pytest.approx(4e6 / 0.002 / 1e9 * 1.0)  # 2 GB/s, factor 1 on 2 ranks


def test_file_without_bytes_sent_falls_back_to_the_bucket_table(make_run):
    path = make_run("old.h5", compression="fp16", bucket_bytes=[8_000_000], bytes_sent=False,
                    allreduce_time=np.full((2, 4, 1), 0.004))
    with Run(path) as run:
        assert BucketBandwidth(run).median_busbw() == pytest.approx(4e6 / 0.004 / 1e9)  # 1 GB/s
    path = make_run("old-psgd.h5", compression="powersgd", bytes_sent=False)
    with Run(path) as run, pytest.raises(ResultsError, match="bytes on the wire are unknown"):
        BucketBandwidth(run)


def test_unrecorded_buckets_are_left_out(make_run):
    t = np.full((2, 4, 2), 0.001)
    t[:, 2, 1] = 0.0  # bucket 1 of step 2 recorded no time
    with Run(make_run("gap.h5", bucket_bytes=[2_000_000, 1_000_000], allreduce_time=t)) as run:
        bw = BucketBandwidth(run)
        assert np.isnan(bw.busbw[2, 1])
        # step 1: 3e6 B / 0.002 s = 1.5 GB/s; step 2: bucket 0 only, 2e6 / 0.001 = 2 GB/s; median 1.75
        assert bw.per_step()["busbw"][1:3] == pytest.approx([1.5, 2.0])
        assert bw.median_busbw() == pytest.approx(1.75)


def test_one_rank_has_no_bus(make_run):
    with Run(make_run("np1.h5", world_size=1)) as run:
        bw = BucketBandwidth(run)
        assert bw.busbw is None and bw.median_busbw() is None
        assert bw.median_algbw() == pytest.approx(5e6 / 0.002 / 1e9)


def test_file_without_bucket_times(make_run):
    with Run(make_run("nobuckets.h5", with_bucket_times=False)) as run:
        with pytest.raises(ResultsError, match="missing dataset 'buckets/allreduce_time'"):
            BucketBandwidth(run)


def test_buckets_report_by_hand(make_run, capsys):
    import json
    from vitddp_tools import report
    path = four_rank_file(make_run)
    assert report.main(["buckets", path, "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["bucket"] for r in rows] == [0, 1]
    assert [r["busbw_gbps"] for r in rows] == pytest.approx([45.0, 22.5])
    assert [r["busbw_min_gbps"] for r in rows] == pytest.approx([30.0, 15.0])
    assert [r["busbw_max_gbps"] for r in rows] == pytest.approx([60.0, 30.0])
    assert [r["time_ms"] for r in rows] == pytest.approx([15.0, 7.5])  # medians of 10/20 and 5/10 ms
    assert report.main(["buckets", path, "--per-step", "--format", "csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "step,timed,bytes,time_ms,algbw_gbps,busbw_gbps"
    step1 = lines[2].split(",")
    assert step1[:2] == ["1", "1"] and float(step1[5]) == pytest.approx(50.0)
