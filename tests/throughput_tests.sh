#!/usr/bin/env bash
# The summary's throughput under gradient accumulation, on 2 CPU-backend ranks: --grad-accum-steps 1
# with --batch-size 4 and --grad-accum-steps 2 with --batch-size 2 have the same global_batch_size
# (8 images per optimizer step), and every run's images_per_second_per_rank is steps_per_second x
# batch_size x K (each of the K micro-batches counts), images_per_second that x world_size,
# tflops_per_rank 3 x forward FLOPs x images/s per rank; the console summary prints the same.
# Usage: throughput_tests.sh <vitddp binary> <mpirun> <python3>
set -u
BIN=$1
source "$(dirname "$0")/test_util.sh" "$2"
PY=$3

COMMON="--backend cpu --model vit_micro --warmup-steps 1 --steps 3"
for run in "1 4" "2 2" "3 1"; do
  set -- $run
  k=$1 b=$2
  out=$(timeout 120 $MPIRUN -np 2 "$BIN" $COMMON --grad-accum-steps "$k" --batch-size "$b" --out "$TMP/k$k.h5" 2>&1)
  rc=$?
  if [ $rc -ne 0 ]; then bad "K=$k run: rc=$rc: $out"; continue; fi
  if check=$("$PY" - "$TMP/k$k.h5" "$k" "$b" "$out" 2>&1 <<'PY'
import sys, re, h5py
path, k, b, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
with h5py.File(path, "r") as f:
    a, s = f.attrs, {n: d[()] for n, d in f["summary"].items()}
    world = int(a["world_size"])
    assert world == 2, world
    assert int(a["batch_size"]) == b, a["batch_size"]
    assert int(a["option.grad-accum-steps"]) == k
    assert int(a["global_batch_size"]) == b * k * world, (a["global_batch_size"], b * k * world)
    rel = lambda x, y: abs(x - y) <= 1e-12 * abs(y)
    per_rank = s["steps_per_second"] * b * k
    assert rel(s["images_per_second_per_rank"], per_rank), (s["images_per_second_per_rank"], per_rank)
    assert rel(s["images_per_second"], per_rank * world), (s["images_per_second"], per_rank * world)
    tf = 3 * float(a["forward_flops_per_image"]) * per_rank / 1e12
    assert rel(s["tflops_per_rank"], tf), (s["tflops_per_rank"], tf)
    assert rel(s["steps_per_second"], 3 / s["timed_window"]), (s["steps_per_second"], s["timed_window"])
    d = f["summary/images_per_second_per_rank"].attrs["description"]
    assert "grad_accum_steps" in (d if isinstance(d, str) else d.decode()), d
m = re.search(r"([0-9.]+) steps/s per rank, ([0-9.]+) images/s per rank, ([0-9.]+) images/s total", out)
assert m, out
sps, ipr, tot = map(float, m.groups())
assert abs(ipr - sps * b * k) <= 0.01 * ipr + 0.1, (sps, ipr)
assert abs(tot - 2 * ipr) <= 0.001 * tot + 0.1, (ipr, tot)
print("global_batch_size %d, %.1f images/s per rank = %.2f steps/s x %d x %d" % (b * k * world, ipr, sps, b, k))
PY
  ); then ok "K=$k, batch $b: $check"; else bad "K=$k, batch $b: $check"; fi
done
finish
