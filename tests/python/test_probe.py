"""vitddp-plot busbw --probe and vitddp-report summary --probe on a hand-made vitddp-probe file."""
import json
import math

import h5py
import numpy as np

from vitddp_tools import plot, report


def write_probe(path, nbytes=(1 << 20, 1 << 22), busbw=(10.0, 30.0), world_size=2):
    """A file as vitddp-probe writes it (docs/benchmarks.md, "Link probe"): all-reduce only."""
    with h5py.File(path, "w") as f:
        f.attrs["program"] = "vitddp-probe"
        f.attrs["transport"] = "nccl"
        f.attrs["world_size"] = world_size
        f["link_probe/bytes"] = np.asarray(nbytes, dtype=np.int64)
        bw = np.asarray(busbw, dtype=float)
        f["link_probe/allreduce/busbw"] = bw
        f["link_probe/allreduce/algbw"] = bw / (2.0 * (world_size - 1) / world_size)
        f["link_probe/allreduce/time"] = np.asarray(nbytes) / (f["link_probe/allreduce/algbw"][()] * 1e9)
    return str(path)


def run_main(main, argv, capsys):
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def test_summary_gives_the_probe_busbw_at_the_median_bucket_size(make_run, tmp_path, capsys):
    run = make_run("run.h5", bucket_bytes=[4_000_000, 1_000_000, 2_000_000])  # median bucket: 2e6 bytes
    probe = write_probe(tmp_path / "probe.h5")
    rc, out, err = run_main(report.main, ["summary", run, "--probe", probe, "--json"], capsys)
    assert rc == 0, err
    m = json.loads(out)["runs"][0]
    # By hand: 2e6 lies between 2^20 (10 GB/s) and 2^22 (30 GB/s), a fraction (log2(2e6) - 20) / 2 of the way.
    want = 10.0 + (math.log2(2e6) - 20.0) / 2.0 * 20.0
    assert m["bucket_median_bytes"] == 2e6
    assert abs(m["probe_busbw_gbps"] - want) < 1e-9
    assert m["busbw_gbps"] is not None  # the run's own, next to it
    rc, out, _ = run_main(report.main, ["summary", run, "--probe", probe], capsys)
    assert rc == 0 and "link probe busbw at that size (GB/s) | %.2f" % want in out
    rc, out, _ = run_main(report.main, ["summary", run], capsys)  # without --probe: unchanged rows
    assert rc == 0 and "link probe" not in out


def test_summary_probe_outside_its_range_and_bad_files(make_run, tmp_path, capsys):
    run = make_run("run.h5")  # buckets of 4e6 and 1e6 bytes: median 2.5e6
    probe = write_probe(tmp_path / "small.h5", nbytes=(1024, 4096), busbw=(1.0, 2.0))
    rc, out, _ = run_main(report.main, ["summary", run, "--probe", probe, "--json"], capsys)
    assert rc == 0 and json.loads(out)["runs"][0]["probe_busbw_gbps"] is None  # NaN: not extrapolated
    rc, _, err = run_main(report.main, ["summary", run, "--probe", run], capsys)
    assert rc == 2 and err.count("\n") == 1 and "no link_probe group" in err
    rc, _, err = run_main(report.main, ["summary", run, "--probe", str(tmp_path / "none.h5")], capsys)
    assert rc == 2 and err.count("\n") == 1 and "no such file" in err


def test_busbw_plot_draws_the_probe(make_run, tmp_path, capsys):
    run = make_run("run.h5")
    probe = write_probe(tmp_path / "probe.h5")
    out = tmp_path / "busbw.svg"
    rc, stdout, err = run_main(plot.main, ["busbw", run, "--probe", probe, "-o", str(out)], capsys)
    assert rc == 0, err
    assert "link probe probe.h5 (all-reduce of one message)" in out.read_text()
    rc, _, err = run_main(plot.main, ["busbw", run, "--probe", run, "-o", str(tmp_path / "x.png")], capsys)
    assert rc == 2 and err.count("\n") == 1 and "no link_probe group" in err
