"""Tests of `vitddp-report kernels` (vitddp_tools.kernels: a step's GPU time per kernel family
against floors) on a hand-made Nsight Compute CSV: families, sums, floors, the .xz reader and the
one-line errors."""
import json
import lzma
import os
import subprocess
import sys

import pytest

from vitddp_tools import kernels as kernel_table

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
          '"Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"\n')


def row(i, name, metric, unit, value):
    return (f'"{i}","1","vitddp","h","{name}","1","13","(256, 1, 1)","(8, 1, 1)","0","9.0",'
            f'"Command line profiler metrics","{metric}","{unit}","{value}"\n')


def write_csv(path):
    lines = ["[vitddp] a line of the program's own output\n", HEADER]
    kernels = [(0, "nvjet_sm90_tst_256x96_bias_TNT", 2_000_000, 1000), (1, "nvjet_sm90_tss_128x64_NTT", 1_000_000, 500),
               (2, "void vitddp::gelu_backward_bias_kernel<__nv_bfloat16>(const T1 *)", 4_300_000, 300),
               (3, "void ln_warp::forward<6, float>(const float *)", 860_000, 1_000)]
    for i, name, nbytes, ns in kernels:
        lines += [row(i, name, "dram__bytes_read.sum", "byte", f"{nbytes // 2:,}"),
                  row(i, name, "dram__bytes_write.sum", "byte", f"{nbytes - nbytes // 2:,}"),
                  row(i, name, "gpu__time_duration.sum", "ns" if i != 3 else "us", f"{ns if i != 3 else 1:,}")]
    with open(path, "w") as f:
        f.writelines(lines)


def test_families_sums_and_floors(tmp_path):
    csv_path = str(tmp_path / "step.csv")
    write_csv(csv_path)
    kernels = kernel_table.read_ncu(csv_path)
    assert len(kernels) == 4 and kernels["3"]["ns"] == 1000.0 and kernels["0"]["bytes"] == 2_000_000
    rows, total = kernel_table.table(kernels, gemm_us=0.75, hbm_gbps=4300.0)
    by = {r[0]: r for r in rows}
    assert total == pytest.approx(2.8)  # (1000 + 500 + 300 + 1000) ns
    gemm = by["GEMM (cuBLASLt)"]
    assert gemm[1] == 2 and gemm[2] == pytest.approx(1.5) and gemm[5] == 0.75 and gemm[6] == pytest.approx(2.0)
    gelu = by["GELU backward + bias gradient"]
    assert gelu[5] == pytest.approx(1.0) and gelu[6] == pytest.approx(0.3)  # 4.3 MB at 4300 GB/s = 1 us
    ln = by["LayerNorm forward"]
    assert ln[5] == pytest.approx(0.2) and ln[6] == pytest.approx(5.0)
    assert [r[0] for r in rows][0] == "GEMM (cuBLASLt)"  # sorted by time
    assert sum(r[3] for r in rows) == pytest.approx(1.0)


def test_gemm_and_attention_floors_from_the_ceilings_file(tmp_path):
    g = tmp_path / "gemm.json"
    g.write_text(json.dumps({"ceilings": {"bf16": {"forward_tflops": 500.0, "gemms": [{"ms": 0.01}, {"ms": 0.02}]}}}))
    assert kernel_table.gemm_floor_us(str(g), "vit_l_32", "bf16") == pytest.approx(24 * 30.0)
    # vit_l_32: T = 50, D = 1024, 24 blocks; batch 2: forward 4 T^2 D B L FLOPs at 500 TFLOP/s
    fwd = kernel_table.attention_floor_us(str(g), "vit_l_32", "bf16", 2, False)
    assert fwd == pytest.approx(4 * 50 ** 2 * 1024 * 2 * 24 / 500e6)
    assert kernel_table.attention_floor_us(str(g), "vit_l_32", "bf16", 2, True) == pytest.approx(2 * fwd)


def test_xz_input_and_main(tmp_path, capsys):
    csv_path = str(tmp_path / "step.csv")
    write_csv(csv_path)
    with open(csv_path, "rb") as f, lzma.open(csv_path + ".xz", "wb") as out:
        out.write(f.read())
    assert kernel_table.main([csv_path + ".xz", "--model", "vit_b_16"]) == 0
    text = capsys.readouterr().out
    assert "| GELU backward + bias gradient | 1 | 0.3 |" in text and "| **step** | 4 | 2.8 | 100% |" in text
    assert "| `void ln_warp::forward<6, float>` | 1 | 1.0 | 1.0 |" in text  # the slowest kernels


def test_slowest_kernels_group_launches_by_name_without_arguments(capsys, tmp_path):
    kernels = {"0": {"name": "gemm_a(const float *)", "ns": 1000.0}, "1": {"name": "gemm_a(float *)", "ns": 500.0},
               "2": {"name": "ln(const float *)", "ns": 1200.0}, "3": {"name": "tiny()", "ns": 10.0}}
    assert kernel_table.top_kernels(kernels, 2) == [("gemm_a", 2, 1.5), ("ln", 1, 1.2)]
    csv_path = str(tmp_path / "step.csv")
    write_csv(csv_path)
    assert kernel_table.main([csv_path, "--top", "2"]) == 0
    text = capsys.readouterr().out
    # the two slowest kernels (1 us each, in the file's order), then a blank line closing the table
    assert text.endswith("| `nvjet_sm90_tst_256x96_bias_TNT` | 1 | 1.0 | 1.0 |\n"
                         "| `void ln_warp::forward<6, float>` | 1 | 1.0 | 1.0 |\n\n")
    assert "| `nvjet_sm90_tss_128x64_NTT` |" not in text  # the third (0.5 us)


def test_unreadable_file_is_one_line_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "not-ncu.csv"
    bad.write_text("hello\n")
    assert kernel_table.main([str(bad)]) == 2
    assert "no ncu --csv metrics" in capsys.readouterr().err
    assert kernel_table.main([str(tmp_path / "missing.csv")]) == 2


def test_ceilings_of_another_model_or_batch_and_bad_settings_are_refused(tmp_path, capsys):
    csv_path = str(tmp_path / "step.csv")
    write_csv(csv_path)
    g = tmp_path / "gemm.json"
    g.write_text(json.dumps({"model": "vit_b_16", "batch_size": 32,
                             "ceilings": {"bf16": {"forward_tflops": 500.0, "gemms": [{"ms": 0.01}]}}}))
    assert kernel_table.main([csv_path, "--gemm", str(g), "--model", "vit_b_16"]) == 0
    capsys.readouterr()
    assert kernel_table.main([csv_path, "--gemm", str(g), "--model", "vit_l_32"]) == 2
    assert "ceilings of vit_b_16, not of --model vit_l_32" in capsys.readouterr().err
    assert kernel_table.main([csv_path, "--gemm", str(g), "--model", "vit_b_16", "--batch-size", "8"]) == 2
    assert "not at --batch-size 8" in capsys.readouterr().err
    assert kernel_table.main([csv_path, "--gemm", str(g), "--model", "vit_b_16", "--precision", "fp32"]) == 2
    assert "no fp32 ceilings" in capsys.readouterr().err
    for bad in (["--batch-size", "0"], ["--hbm-gbps", "0"], ["--hbm-gbps", "nan"]):
        with pytest.raises(SystemExit) as e:
            kernel_table.main([csv_path] + bad)
        assert e.value.code == 2
    truncated = tmp_path / "cut.csv"
    truncated.write_text(open(csv_path).read()[:-40])
    assert kernel_table.main([str(truncated)]) == 2
    assert "truncated" in capsys.readouterr().err


def test_batched_gemm_attention_kernels_have_their_family():
    # --attention gemm: its row kernels are attention, its products the cuBLAS GEMMs they are.
    fam = "attention softmax (vitddp, batched GEMMs)"
    assert kernel_table.family("void vitddp::(anonymous namespace)::softmax_rows_kernel(float *, long long, int)") == fam
    assert kernel_table.family("void vitddp::(anonymous namespace)::softmax_backward_rows_kernel(const float *, "
                               "float *, long long, int)") == fam
    assert kernel_table.family("void vitddp::(anonymous namespace)::fill_pointers_kernel(PointerPlan, int, int, "
                               "const float **)") == fam
    assert kernel_table.family("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32") == "GEMM (cuBLASLt)"


def test_layernorm_kernels_of_every_width_have_their_family():
    # D = 128 x V (V <= 8) runs ln_warp's kernels; other widths (vit_h_14's 1280) the row kernels.
    for kind, fam in (("forward", "LayerNorm forward"), ("backward", "LayerNorm backward")):
        assert kernel_table.family("void vitddp::<unnamed>::ln_%s_vec_kernel<__nv_bfloat16>(const float *, int)" % kind) == fam
        assert kernel_table.family("void vitddp::<unnamed>::ln_%s_kernel<float>(const float *, int)" % kind) == fam
        assert kernel_table.family("void vitddp::ln_warp::%s<(int)8, __nv_bfloat16>(const float *, int)" % kind) == fam


def test_profile_readme_says_how_many_gemms_are_a_plain_runs(tmp_path):
    """results/commands/kernel-profile.sh --readme: without a comparison file the README warns that
    the GEMM rows may not be a plain run's; with one it counts the GEMMs that are."""
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    write_csv(tmp_path / "ncu-vit_l_32-tf32-b32.csv")
    env = dict(os.environ, PYTHON=sys.executable)

    def readme():
        subprocess.run(["bash", os.path.join(root, "results", "commands", "kernel-profile.sh"), "--readme",
                        str(tmp_path)], check=True, env=env, capture_output=True)
        return (tmp_path / "README.md").read_text()

    text = readme()
    assert "No plain run was compared with vit_l_32-tf32-b32: " in text
    assert "### vit_l_32, batch 32, tf32: one training step" in text
    (tmp_path / "gemm-choices-vit_l_32-tf32-b32.txt").write_text(
        "same    D 1024x1600: ...\ndiffers D 4096x1600: ...\n17 GEMMs: 15 the same in every file, 2 differ\n")
    write_csv(tmp_path / "ncu-vit_b_16-tf32-b32.csv")  # a second profile, without a comparison
    text = readme()
    assert "vit_l_32-tf32-b32: 15 of 17 GEMMs ended with\nthe algorithm of a plain run" in text
    assert "No plain run was compared with vit_b_16-tf32-b32: " in text
    assert "vit_l_32-tf32-b32: each" not in text
