"""vitddp-report summary / compare and vitddp-plot busbw on hand-made files: formats, values,
ratios, errors (exit 2 with one line); the console scripts pip installed."""
import csv
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from vitddp_tools import plot, report
from vitddp_tools.overlap import union_length
from vitddp_tools.reader import open_runs


def run_main(main, argv, capsys):
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def two_runs(make_run):
    """A 2-rank run at 10 steps/s whose two buckets move 4e6 + 1e6 bytes in 0.001 s each (5e6 B /
    0.002 s = 2.5 GB/s busbw), and the same with bf16 compression at 12 steps/s: half the bytes in
    the same time (1.25 GB/s), exposed comm 2 ms instead of 1."""
    a = make_run("a.h5", sps=10.0)
    b = make_run("b.h5", sps=12.0, compression="bf16", exposed=np.full((2, 4), 0.002),
                 options={"lr": "0.002"})
    return a, b


def test_summary_json_values(make_run, capsys):
    a, _ = two_runs(make_run)
    rc, out, _ = run_main(report.main, ["summary", a, "--json"], capsys)
    assert rc == 0
    doc = json.loads(out)
    m = doc["runs"][0]
    assert m["file"] == "a.h5" and m["world_size"] == 2 and m["compression"] == "none"
    assert m["steps_per_second"] == 10.0
    assert m["images_per_second"] == pytest.approx(10 * 8 * 1 * 2)
    assert m["busbw_gbps"] == pytest.approx(5e6 / 0.002 / 1e9 * 1.0)  # 2 ranks: factor 2 x 1 / 2 = 1
    assert m["exposed_comm_median_ms"] == pytest.approx(1.0)
    assert m["step_time_median_ms"] == pytest.approx(100.0) and m["step_time_cv"] == 0.0
    assert m["peak_memory_gib"] is None and m["bucket_cap_mb"] == 25.0 and m["data"] == "synthetic"
    assert doc["units"]["busbw_gbps"] == "GB/s"


def test_summary_markdown_and_csv(make_run, capsys, tmp_path):
    a, b = two_runs(make_run)
    out_md = str(tmp_path / "s.md")
    rc, out, _ = run_main(report.main, ["summary", a, b, "-o", out_md], capsys)
    assert rc == 0 and open(out_md).read() == out
    lines = out.splitlines()
    assert lines[0] == "|  | a.h5 | b.h5 |"
    assert "| busbw median (GB/s) | 2.50 | 1.25 |" in lines
    assert "| compression | none | bf16 |" in lines
    assert "| grad accumulation | 1 | 1 |" in lines
    rc, out, _ = run_main(report.main, ["summary", a, b, "--csv"], capsys)
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [r["file"] for r in rows] == ["a.h5", "b.h5"]
    assert float(rows[1]["steps_per_second"]) == 12.0 and rows[0]["peak_memory_gib"] == ""


def test_summary_notes_a_file_images_per_second_that_ignores_accumulation(make_run, capsys):
    p = make_run("k2.h5", sps=2.0, grad_accum=2, summary_ips=32.0)
    rc, out, _ = run_main(report.main, ["summary", p], capsys)
    assert rc == 0
    assert "| images/s (all ranks) | 64.0 |" in out
    assert "`k2.h5`: the file's `summary/images_per_second` reads 32.0" in out


def test_compare_differing_options_and_ratios(make_run, capsys):
    a, b = two_runs(make_run)
    rc, out, _ = run_main(report.main, ["compare", a, b, "--format", "json"], capsys)
    assert rc == 0
    doc = json.loads(out)
    assert doc["reference"] == "a.h5"
    assert doc["differing"] == {"compression": ["none", "bf16"], "option.lr": ["0.001", "0.002"]}
    assert doc["metrics"]["steps_per_second"]["ratio_to_first"] == pytest.approx([1.0, 1.2])
    assert doc["metrics"]["busbw_gbps"]["ratio_to_first"] == pytest.approx([1.0, 0.5])
    assert doc["metrics"]["exposed_comm_median_ms"]["ratio_to_first"] == pytest.approx([1.0, 2.0])
    rc, out, _ = run_main(report.main, ["compare", a, b], capsys)
    assert "| option.lr | 0.001 | 0.002 |" in out
    assert "| steps/s | 10.000 | 12.000 (1.200x) |" in out
    assert "| busbw median (GB/s) | 2.50 | 1.25 (0.500x) |" in out
    rc, out, _ = run_main(report.main, ["compare", a, b, "--format", "csv"], capsys)
    rows = list(csv.DictReader(io.StringIO(out)))
    r = [x for x in rows if x["field"] == "images_per_second" and x["file"] == "b.h5"][0]
    assert float(r["value"]) == pytest.approx(192.0) and float(r["ratio_to_first"]) == pytest.approx(1.2)


def test_compare_shows_ddp_and_overlap_once(make_run, capsys):
    """--no-overlap and --no-ddp appear as the configuration's "overlap" and "DDP", not a second
    time as option.no-overlap / option.no-ddp."""
    import h5py
    a, b = make_run("a.h5"), make_run("b.h5")
    for path, off in ((a, False), (b, True)):
        with h5py.File(path, "a") as f:
            f.attrs["overlap"] = 0 if off else 1
            f.attrs["option.no-overlap"] = "true" if off else "false"
            f.attrs["option.no-ddp"] = "false"
    rc, out, _ = run_main(report.main, ["compare", a, b, "--format", "json"], capsys)
    assert rc == 0
    assert json.loads(out)["differing"] == {"overlap": ["yes", "no"]}


def test_compare_names_runs_of_one_file_name_by_their_folders(make_run, capsys):
    one, two = make_run("one.h5"), make_run("two.h5", world_size=4)
    base = os.path.dirname(one)
    for d in ("nvlink", "shm"):
        os.makedirs(os.path.join(base, d))
    a, b = os.path.join(base, "nvlink", "b25.h5"), os.path.join(base, "shm", "b25.h5")
    os.rename(one, a)
    os.rename(two, b)
    rc, out, _ = run_main(report.main, ["compare", a, b], capsys)
    assert rc == 0
    assert "| setting | nvlink/b25.h5 | shm/b25.h5 |" in out


def test_errors_exit_2_with_one_line(make_run, capsys, tmp_path):
    a = make_run("a.h5")
    rc, out, err = run_main(report.main, ["summary", a, str(tmp_path / "nope.h5")], capsys)
    assert rc == 2 and out == "" and err.count("\n") == 1 and "nope.h5: no such file" in err
    rc, _, err = run_main(report.main, ["compare", a], capsys)
    assert rc == 2 and "at least two files" in err
    rc, _, err = run_main(report.main, ["frobnicate"], capsys)
    assert rc == 2 and "unknown subcommand 'frobnicate'" in err
    rc, _, err = run_main(plot.main, ["busbw", make_run("old.h5", with_bucket_times=False), "-o",
                                      str(tmp_path / "x.png")], capsys)
    assert rc == 2 and err.count("\n") == 1 and "missing dataset 'buckets/allreduce_time'" in err
    rc, _, err = run_main(plot.main, ["busbw", make_run("np1.h5", world_size=1), "-o", str(tmp_path / "x.png")], capsys)
    assert rc == 2 and "one rank: no bus bandwidth" in err


def is_png(path):
    with open(path, "rb") as f:
        return f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_busbw_plot(make_run, tmp_path, capsys):
    a, b = two_runs(make_run)
    out = str(tmp_path / "busbw.png")
    rc, stdout, _ = run_main(plot.main, ["busbw", a, "-o", out], capsys)
    assert rc == 0 and is_png(out) and "wrote " + out in stdout
    rc, _, _ = run_main(plot.main, ["busbw", a, b, "-o", str(tmp_path / "two.svg")], capsys)
    assert rc == 0 and "<svg" in open(tmp_path / "two.svg").read()


def test_busbw_plot_with_a_link_probe(make_run, tmp_path, capsys):
    import h5py
    a = make_run("probe.h5")
    with h5py.File(a, "r+") as f:
        f["link_probe/bytes"] = np.array([1 << 20, 1 << 24], dtype=np.int64)
        f["link_probe/time"] = np.array([1e-4, 1e-3])
    from vitddp_tools.bandwidth import link_probe
    from vitddp_tools.reader import Run
    with Run(a) as run:
        nbytes, bw = link_probe(run)
    assert bw == pytest.approx([(1 << 20) / 1e-4 / 1e9, (1 << 24) / 1e-3 / 1e9])
    rc, _, _ = run_main(plot.main, ["busbw", a, "-o", str(tmp_path / "p.png")], capsys)
    assert rc == 0 and is_png(tmp_path / "p.png")


def test_union_length():
    assert union_length([0.0, 1.0, 5.0], [2.0, 3.0, 6.0]) == pytest.approx(4.0)  # [0,3] + [5,6]
    assert union_length([1.0], [1.0]) == 0.0


def test_console_scripts_installed(make_run, tmp_path):
    bindir = os.path.dirname(sys.executable)
    for name in ("vitddp-plot", "vitddp-report"):
        exe = os.path.join(bindir, name)
        if not os.path.exists(exe):
            pytest.skip("%s not installed next to %s (pip install ./results)" % (name, sys.executable))
    a, b = two_runs(make_run)
    r = subprocess.run([os.path.join(bindir, "vitddp-report"), "summary", a, "--csv"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("file,model,world_size")
    r = subprocess.run([os.path.join(bindir, "vitddp-plot"), "busbw", a, "-o", str(tmp_path / "c.png")],
                       capture_output=True, text=True)
    assert r.returncode == 0 and is_png(tmp_path / "c.png")
    r = subprocess.run([os.path.join(bindir, "vitddp-report"), "summary", str(tmp_path / "missing.h5")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.strip() == "vitddp-report: error: %s: no such file" % (tmp_path / "missing.h5")


def test_scaling_averages_repeated_runs_and_says_so(make_run):
    runs = open_runs([make_run("a.h5", sps=10.0), make_run("b.h5", sps=12.0), make_run("c.h5", world_size=1, sps=15.0,
                                                                                   attrs={"ddp": 0})])
    (rs,) = plot._scaling_lines(runs).values()
    assert plot._scaling_points(rs) == ([1, 2], [15.0, 11.0], 2)


def test_timeline_steps_are_vitddp_step_numbers():
    """--steps takes the step numbers vitddp prints (from 0); a resumed file's index 0 is step
    resumed_from_step, so steps 4 and 5 of a file resumed at step 4 are its indices 0 and 1."""
    assert plot.parse_steps("1,2", 5, "a.h5") == [1, 2]
    assert plot.parse_steps("4-5", 4, "r.h5", first=4) == [0, 1]
    with pytest.raises(plot.PlotError, match=r"--steps: step 3 is not in r.h5 \(recorded steps 4..7\)"):
        plot.parse_steps("3", 4, "r.h5", first=4)


def test_per_rank_busbw_is_each_ranks_own_figure(make_run):
    """bandwidth.per_rank_busbw (vitddp's buckets/busbw): each rank's bytes / its own time x 2(n-1)/n;
    0 where no time was recorded."""
    from vitddp_tools.bandwidth import per_rank_busbw
    from vitddp_tools.reader import Run
    t = np.full((2, 4, 2), 0.001)
    t[1, :, 0] = 0.002
    t[0, 0, 1] = 0.0
    with Run(make_run("p.h5", allreduce_time=t)) as run:
        bw = per_rank_busbw(run)
    assert bw.shape == (2, 4, 2)
    assert bw[0, 1, 0] == pytest.approx(4e6 / 0.001 / 1e9)   # factor 2(2-1)/2 = 1
    assert bw[1, 1, 0] == pytest.approx(4e6 / 0.002 / 1e9)
    assert bw[0, 0, 1] == 0.0


def test_an_output_never_overwrites_an_input(make_run, capsys, tmp_path):
    """-o naming one of the command's inputs, a directory or a path in a missing folder is refused
    with one line before anything is printed; the input is left as it was."""
    a, b = two_runs(make_run)
    before = open(a, "rb").read()
    for argv, want in ((["summary", a, "-o", a], "-o %s: is also an input of this command" % a),
                       (["compare", a, b, "-o", b], "-o %s: is also an input of this command" % b),
                       (["summary", a, "-o", str(tmp_path)], "is a directory"),
                       (["summary", a, "-o", str(tmp_path / "no" / "x.md")], "does not exist"),
                       (["summary", a, "-o", ""], "-o: an empty path")):
        rc, out, err = run_main(report.main, argv, capsys)
        assert rc == 2 and out == "" and err.count("\n") == 1 and want in err, (argv, err)
    rc, out, err = run_main(plot.main, ["phases", a, "-o", a], capsys)
    assert rc == 2 and err.count("\n") == 1 and "is also an input" in err
    assert open(a, "rb").read() == before


def test_losses_missing_or_unreadable_files_exit_2(make_run, capsys, tmp_path):
    a, b = two_runs(make_run)
    rc, out, _ = run_main(report.main, ["losses", a, a], capsys)
    assert rc == 0 and out.strip().endswith("identical")
    bad = tmp_path / "notes.txt"
    bad.write_text("not HDF5")
    for argv, want in ((["losses", a, str(tmp_path / "gone.h5")], "gone.h5: no such file"),
                       (["losses", a, str(bad)], "notes.txt: cannot read training/loss"),
                       (["losses", a], "give files in pairs")):
        rc, out, err = run_main(report.main, argv, capsys)
        assert rc == 2 and out == "" and err.count("\n") == 1 and want in err, (argv, err)
    rc, out, err = run_main(report.main, ["speed", str(tmp_path / "nowhere")], capsys)
    assert rc == 2 and out == "" and "nowhere: no such folder" in err


def test_malformed_inputs_give_one_line_not_a_traceback(capsys, tmp_path):
    """A truncated archive (article) ends in one error line, exit 2."""
    trunc = tmp_path / "trunc.tar.xz"
    trunc.write_bytes(b"\xfd7zXZ\x00\x00")
    rc, out, err = run_main(report.main, ["article", str(trunc), "--no-plots"], capsys)
    assert rc == 2 and err.count("\n") == 1 and "error:" in err and "Traceback" not in err


def test_other_vitddp_files_are_named_for_what_they_are(make_run, capsys, tmp_path):
    import h5py
    for kind in ("vitddp-checkpoint", "vitddp-weights", "vitddp-probe"):
        p = tmp_path / (kind + ".h5")
        with h5py.File(p, "w") as f:
            f.attrs["format" if kind != "vitddp-probe" else "program"] = kind
        rc, out, err = run_main(report.main, ["summary", str(p)], capsys)
        assert rc == 2 and err.count("\n") == 1 and "a %s file, not the results file" % kind in err, err


def test_a_run_without_ddp_has_no_exposed_comm_to_compare(make_run, capsys):
    one = make_run("one.h5", world_size=1, attrs={"ddp": 0}, exposed=np.full((1, 4), 1e-7))
    a, _ = two_runs(make_run)
    rc, out, _ = run_main(report.main, ["summary", one, "--json"], capsys)
    assert rc == 0 and json.loads(out)["runs"][0]["exposed_comm_median_ms"] is None
    rc, out, _ = run_main(report.main, ["compare", one, a], capsys)
    row = next(line for line in out.splitlines() if line.startswith("| exposed comm median"))
    assert "n/a" in row and "x)" not in row, row
