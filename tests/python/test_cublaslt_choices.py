"""results/tools/cublaslt_choices.py on hand-written cuBLASLt trace lines (the format of
CUBLASLT_LOG_LEVEL=2): the last call of each GEMM is its choice, pointers and addresses do not
split a GEMM, beta does, .xz logs are read, and unreadable or empty logs exit 2."""
import importlib.util
import lzma
import os

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(ROOT, "results", "tools", "cublaslt_choices.py")
_spec = importlib.util.spec_from_file_location("cublaslt_choices", SCRIPT)
tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tool)


def call(m, n, k, algo, beta=0, a_ptr="0X7F00", bias="0x7f10"):
    """One cublasLtMatmul trace line of D[n, m] = A^T B (column-major), as cuBLASLt writes it."""
    return ("[2026-12-07 06:41:59][cublasLt][2173][Trace][cublasLtMatmul] A=%s "
            "Adesc=[type=R_32F rows=%d cols=%d ld=%d] B=0X7E00 Bdesc=[type=R_32F rows=%d cols=%d ld=%d] "
            "C=0X7D00 Cdesc=[type=R_32F rows=%d cols=%d ld=%d] D=0X7D00 Ddesc=[type=R_32F rows=%d cols=%d ld=%d] "
            "computeDesc=[computeType=COMPUTE_32F_FAST_TF32 scaleType=R_32F transa=OP_T epilogue=EPILOGUE_BIAS "
            "biasPointer=%s] algo=[%s] workSpace=0X7C00 workSpaceSizeInBytes=33554432 beta=%d outOfPlace=0 "
            "stream=0X55\n" % (a_ptr, k, n, k, k, m, k, n, m, n, n, m, n, bias, algo, beta))


def write(path, lines, xz=False):
    text = "[2026-12-07 06:41:58][cublasLt][2173][Info][cublasLtCreate] handle created\n" + "".join(lines)
    if xz:
        with lzma.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return str(path)


def test_last_call_is_the_choice_and_pointers_do_not_split_a_gemm(tmp_path):
    log = write(tmp_path / "a.log", [call(1600, 1024, 3072, "algoId=21 tile=T1"),  # autotuning candidates
                                     call(1600, 1024, 3072, "algoId=43 tile=T2", a_ptr="0X7F99", bias="0x1"),
                                     call(1600, 1024, 3072, "algoId=43 tile=T3"),  # the kept one, called last
                                     call(1600, 1024, 3072, "algoId=21 tile=T1", beta=1)])  # beta 1: another GEMM
    c = tool.choices(log)
    assert len(c) == 2
    by_beta = {key[4]: algo for key, algo in c.items()}
    assert by_beta == {"0": "algoId=43 tile=T3", "1": "algoId=21 tile=T1"}
    key = next(k for k in c if k[4] == "0")
    assert "biasPointer" not in key[3] and "EPILOGUE_BIAS" in key[3]
    assert tool.describe(key).startswith("D 1024x1600: ")


def test_two_logs_side_by_side(tmp_path, capsys):
    plain = write(tmp_path / "plain.log", [call(1600, 1024, 3072, "algoId=43"), call(1600, 4096, 1024, "algoId=43")])
    ncu = write(tmp_path / "ncu.log.xz", [call(1600, 1024, 3072, "algoId=23"), call(1600, 4096, 1024, "algoId=43")],
                xz=True)
    assert tool.main([plain, ncu]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "2 GEMMs: 1 the same in every file, 1 differ"
    differs = [i for i, line in enumerate(out) if line.startswith("differs D 1024x1600")]
    assert len(differs) == 1
    assert out[differs[0] + 1].split() == [plain, "algoId=43"]
    assert out[differs[0] + 2].split() == [ncu, "algoId=23"]
    assert sum(line.startswith("same    D 4096x1600") for line in out) == 1


def test_unreadable_or_empty_logs_exit_2(tmp_path, capsys):
    assert tool.main([str(tmp_path / "missing.log")]) == 2
    assert "missing.log: cannot read" in capsys.readouterr().err
    empty = write(tmp_path / "empty.log", [])
    assert tool.main([empty]) == 2
    assert "no cublasLtMatmul line" in capsys.readouterr().err
    broken = tmp_path / "broken.log.xz"
    broken.write_bytes(b"not xz at all")
    assert tool.main([str(broken)]) == 2
    assert "broken.log.xz: cannot read" in capsys.readouterr().err
