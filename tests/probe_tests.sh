#!/usr/bin/env bash
# vitddp-probe on the CPU (the mpi transport): the file's shapes and nccl-tests' formulas, checked
# exactly against the file's own times; bad options refused with one line and exit 2.
# Usage: probe_tests.sh PATH_TO_vitddp-probe MPIEXEC PYTHON3
BIN=$1
source "$(dirname "$0")/test_util.sh" "$2"
PY=$3

out=$(timeout 120 $MPIRUN -np 2 "$BIN" --transport mpi --max-bytes 1M --out "$TMP/probe.h5" 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q "busbw" <<<"$out" && grep -q "written to $TMP/probe.h5" <<<"$out"; then ok "2-rank mpi probe"
else bad "mpi probe rc=$rc: $out"; fi

check=$("$PY" - "$TMP/probe.h5" <<'PYEOF' 2>&1
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
b = f["link_probe/bytes"][()]
assert b.dtype == np.int64, b.dtype
want = 1024 * 2 ** np.arange(11)  # 1K .. 1M, doubling
assert np.array_equal(b, want), b
n = int(f.attrs["world_size"])
assert n == 2 and f.attrs["transport"] == "mpi", dict(f.attrs)
assert sorted(f["link_probe"].keys()) == ["allgather", "allreduce", "bytes", "reducescatter"], list(f["link_probe"])
for coll, factor in (("allreduce", 2.0 * (n - 1) / n), ("reducescatter", (n - 1) / n), ("allgather", (n - 1) / n)):
    t, alg, bus = (f["link_probe/%s/%s" % (coll, k)][()] for k in ("time", "algbw", "busbw"))
    assert t.shape == alg.shape == bus.shape == b.shape, coll
    assert (t > 0).all(), (coll, t)
    assert np.array_equal(alg, b / t / 1e9), coll           # algbw = bytes / time, GB/s
    assert np.array_equal(bus, alg * factor), coll          # busbw = algbw x factor
print("ok")
PYEOF
)
if [ "$check" = "ok" ]; then ok "file: shapes, algbw = bytes/time, busbw = algbw x 2(n-1)/n and (n-1)/n exactly"
else bad "file check: $check"; fi

expect_probe_error() {  # NAME WANT ARGS...: exit 2, WANT on one line, no file
  local name=$1 want=$2; shift 2
  local o rc
  o=$(timeout 60 $MPIRUN -np 2 "$BIN" "$@" 2>&1); rc=$?
  if [ $rc -eq 2 ] && [ "$(grep -c "\[vitddp-probe\] error: .*$want" <<<"$o")" -eq 1 ]; then ok "$name (exit 2: $(grep -F -- "error:" <<<"$o" | cut -c1-120))"
  else bad "$name: rc=$rc, wanted exit 2 and one line with '$want', got: $o"; fi
}
expect_probe_error "unknown transport" "--transport: 'tcp' is not a transport" --transport tcp
expect_probe_error "bad size" "--max-bytes: '1X' is not a positive size" --max-bytes 1X
expect_probe_error "min above max" "--min-bytes (2097152) is larger than --max-bytes (1048576)" --min-bytes 2M --max-bytes 1M
expect_probe_error "unknown option" "unknown option '--bogus'" --bogus
expect_probe_error "no size left" "--max-bytes: 4 is less than one fp32 element per rank (8 bytes)" --min-bytes 4 --max-bytes 4
expect_probe_error "iterations" "--iters: '0' is not an integer >= 1" --iters 0
expect_probe_error "existing --out" "--out: refusing to overwrite existing file" --transport mpi --out "$TMP/probe.h5"
expect_probe_error "share beyond MPI's int counts" "--max-bytes: 17179869184 bytes is a share of more than 2147483647 fp32 elements per rank" \
  --transport mpi --min-bytes 16G --max-bytes 16G --out "$TMP/huge.h5"
VITDDP_TEST_MEMAVAILABLE_KB=1024 expect_probe_error "host memory" "--max-bytes: 2 rank(s) on this host need 0.03 GiB of host memory for two buffers of 0.01 GiB each, but only 0.00 GiB is available" \
  --transport mpi --max-bytes 8M --out "$TMP/mem.h5"
[ ! -e "$TMP/huge.h5" ] && [ ! -e "$TMP/mem.h5" ] && ok "refused runs leave no --out file" || bad "a refused run left its --out file"
# Ranks started with different options (MPMD) stop together with one line instead of crashing or
# hanging in mismatched collectives.
o=$(timeout 60 $MPIRUN -np 1 "$BIN" --transport mpi --max-bytes 1M --iters 5 : -np 1 "$BIN" --transport mpi --max-bytes 2M \
  --iters 6 --out "$TMP/mpmd.h5" 2>&1); rc=$?
want="ranks were started with different options: --iters differs on rank 1; --max-bytes differs on rank 1; --out differs on rank 1"
if [ $rc -eq 2 ] && [ "$(grep -cF "[vitddp-probe] error: $want" <<<"$o")" -eq 1 ] && [ ! -e "$TMP/mpmd.h5" ]; then
  ok "ranks with different options (exit 2, one line, no file)"
else bad "ranks with different options: rc=$rc: $o"; fi
if [ "${VITDDP_GPU_BUILT:-1}" = 0 ]; then
  expect_probe_error "nccl without the GPU backend" "needs the GPU backend" --transport nccl
elif ! nvidia-smi -L >/dev/null 2>&1; then
  expect_probe_error "nccl without a GPU" "--transport nccl: no CUDA device is visible on some rank's host (--transport mpi measures MPI without a GPU)" \
    --transport nccl --out "$TMP/nogpu.h5"
fi
o=$(timeout 60 $MPIRUN -np 1 "$BIN" --help 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q -- "--max-bytes SIZE" <<<"$o"; then ok "--help"; else bad "--help rc=$rc: $o"; fi
finish
