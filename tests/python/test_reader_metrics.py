"""vitddp_tools.reader and metrics against hand-computed values."""
import math

import numpy as np
import pytest

from vitddp_tools.metrics import config, run_metrics, spread
from vitddp_tools.reader import ResultsError, Run


def test_series_units_axes_and_timed_window(make_run):
    with Run(make_run("a.h5", timed=(0, 1, 1, 0))) as run:
        s = run.series("timing/step_time")
        assert s.units == "s" and s.axes == "rank,step" and s.values.shape == (2, 4)
        assert run.bucket_series("buckets/allreduce_time").shape == (2, 4, 2)
        assert run.timed().tolist() == [False, True, True, False]
        assert run.summary_all()["steps_per_second"] == (10.0, "steps/s")
        assert run.option("data") == "synthetic" and run.option("nonexistent", "x") == "x"
        assert run.grad_accum_steps == 1 and run.allreduce == "mpi"


def test_attributes_and_transports(make_run):
    path = make_run("t.h5", backend="gpu", attrs={"nccl_transport": ["P2P [P2P/CUMEM]", "P2P [P2P/CUMEM]"]})
    with Run(path) as run:
        a = run.attrs()
        assert a["world_size"] == 2 and a["model"] == "vit_micro" and a["option.compression"] == "none"
        assert run.transports() == ["P2P [P2P/CUMEM]"] * 2
        assert run.options()["bucket-cap-mb"] == "25" and run.allreduce == "nccl"
    with Run(make_run("c.h5")) as run:
        assert run.transports() == []
        assert config(run)["allreduce"] == "mpi (CPU backend)" and config(run)["collectives"] == "all-reduce"
    with Run(make_run("z.h5", backend="gpu", attrs={"collectives": "reduce-scatter + all-gather (ZeRO-1)"})) as run:
        assert config(run)["collectives"] == "reduce-scatter + all-gather (ZeRO-1)" and config(run)["allreduce"] == "nccl"


def test_errors_name_the_file_and_the_dataset(make_run, tmp_path):
    with pytest.raises(ResultsError, match="nope.h5: no such file"):
        Run(str(tmp_path / "nope.h5"))
    (tmp_path / "text.h5").write_text("not hdf5")
    with pytest.raises(ResultsError, match="text.h5: cannot open as HDF5"):
        Run(str(tmp_path / "text.h5"))
    with Run(make_run("a.h5")) as run, pytest.raises(ResultsError, match="a.h5: missing dataset 'timing/nothing'"):
        run.data("timing/nothing")
    with Run(make_run("b.h5", timed=(0, 0))) as run, pytest.raises(ResultsError, match="no timed steps"):
        run.timed()


def test_eval_series(make_run):
    curve = {"step": [5, 10], "accuracy": [0.5, 0.75], "loss": [1.5, 0.9], "samples": [100, 100], "time": [0.2, 0.3]}
    with Run(make_run("e.h5", eval_curve=curve)) as run:
        e = run.eval_series()
        # A file without step_numbering counted the steps done: the evaluations after steps 4 and 9.
        assert e["step"].tolist() == [4, 9] and e["accuracy"].tolist() == [0.5, 0.75]
    with Run(make_run("z.h5", eval_curve=curve, attrs={"step_numbering": "0-based"})) as run:
        assert run.eval_series()["step"].tolist() == [5, 10]
    with Run(make_run("n.h5")) as run, pytest.raises(ResultsError, match="no evaluation recorded"):
        run.eval_series()


def test_spread_by_hand():
    s = spread([1.0, 2.0, 3.0, 4.0, 10.0])
    assert s["min"] == 1.0 and s["median"] == 3.0 and s["max"] == 10.0
    assert s["p90"] == pytest.approx(7.6)                         # 4 + 0.6 x (10 - 4)
    assert s["cv"] == pytest.approx(math.sqrt(12.5) / 4.0)        # sample sd sqrt(50 / 4), mean 4
    assert spread([2.0])["cv"] == 0.0


def test_images_per_second_with_gradient_accumulation(make_run):
    # 2 steps/s x 8 images x 4 micro-steps x 2 ranks = 128 images/s; the file's summary says 32
    path = make_run("k4.h5", sps=2.0, batch_size=8, grad_accum=4, summary_ips=32.0)
    with Run(path) as run:
        assert run.images_per_second() == pytest.approx(128.0)
        m = run_metrics(run)
    assert m["images_per_second"] == pytest.approx(128.0)
    assert m["images_per_second_file"] == pytest.approx(32.0)
    assert m["tflops_per_rank"] == pytest.approx(3 * 1e9 * 64.0 / 1e12)  # 3 x fwd FLOPs x images/s per rank


def test_step_time_spread_uses_the_slowest_rank_of_the_timed_steps(make_run):
    st = [[9.0, 0.010, 0.030, 0.020, 0.050, 9.0],
          [9.0, 0.012, 0.020, 0.020, 0.040, 9.0]]
    ex = [[1.0, 0.001, 0.002, 0.003, 0.004, 1.0],
          [1.0, 0.002, 0.001, 0.001, 0.001, 1.0]]
    with Run(make_run("s.h5", timed=(0, 1, 1, 1, 1, 0), step_time=st, exposed=ex)) as run:
        m = run_metrics(run)
    # slowest rank per timed step: 12, 30, 20, 50 ms
    assert m["step_time_min_ms"] == pytest.approx(12.0)
    assert m["step_time_median_ms"] == pytest.approx(25.0)
    # sorted 12, 20, 30, 50: p90 at position 0.9 x 3 = 2.7 -> 30 + 0.7 x (50 - 30) = 44
    assert m["step_time_p90_ms"] == pytest.approx(44.0)
    assert m["step_time_max_ms"] == pytest.approx(50.0)
    v = np.array([12.0, 30.0, 20.0, 50.0])
    assert m["step_time_cv"] == pytest.approx(v.std(ddof=1) / v.mean())
    assert m["exposed_comm_median_ms"] == pytest.approx(2.5)  # slowest rank: 2, 2, 3, 4 ms
    assert m["timed_steps"] == 4


def test_mfu_from_the_file_or_the_h200_ceiling(make_run):
    with Run(make_run("h200.h5", backend="gpu", precision="bf16", sps=100.0, batch_size=10,
                      attrs={"device_names": ["NVIDIA H200", "NVIDIA H200"], "forward_flops_per_image": 1e12})) as run:
        m = run_metrics(run)
    # 100 steps/s x 10 images = 1000 images/s per rank; 3 x 1e12 FLOP x 1000 / 1e12 = 3000 TFLOP/s
    assert m["tflops_per_rank"] == pytest.approx(3000.0)
    assert m["mfu"] == pytest.approx(3000.0 / 781.0)
    with Run(make_run("cpu.h5")) as run:
        assert run_metrics(run)["mfu"] is None
