#!/usr/bin/env bash
# ZeRO stage 1 (--shard-optimizer) of the real binary on the CPU backend, vit_micro, 8 steps:
#  - 1 rank with --shard-optimizer equals --no-ddp bit for bit (losses, final weights);
#  - 2, 3 and 4 ranks: the final weights within 1e-6 of DDP's (SGD + momentum + weight decay,
#    AdamW, AdamW with --grad-accum-steps 2; vit_micro's buckets are multiples of 4 elements, so 3
#    ranks get uneven chunks);
#  - a NaN in rank 0's batch (--debug-nan-at-step, --on-nonfinite skip): the step is skipped on
#    every rank, and the run ends within 1e-6 of DDP's with the same fault;
#  - checkpoints hold the full state: resumed runs equal the uninterrupted one bit for bit,
#    sharded -> sharded (3 ranks, AdamW, accumulation), sharded -> DDP and DDP -> sharded (2
#    ranks); a sharded and a DDP checkpoint are the same file; another rank count is refused as
#    for DDP (the data positions depend on it; re-sharding itself is tests/mpi/test_zero_mpi.cpp's);
#  - the results file: `collectives`, reduce-scatter and all-gather bytes per bucket, busbw factors;
#  - --dry-run: the optimizer state of one rank's shard (sum over buckets of ceil(n_b / N)) beside
#    DDP's parameters and gradients, no master copy, no reducer buffer;
#  - refusals (exit 2) naming the option and the reason.
# Usage: zero_tests.sh <vitddp> <mpirun> <python3 with h5py>
set -u
BIN=$1
source "$(dirname "$0")/test_util.sh" "$2"
PY=$3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MODEL="--backend cpu --model vit_micro --batch-size 4 --warmup-steps 2 --steps 4 --cooldown-steps 2 --init random"
BUCKETS="--first-bucket-mb 0.0005 --bucket-cap-mb 0.002"
SGD="--lr 0.05 --momentum 0.9 --weight-decay 0.001"
ADAMW="--optimizer adamw --lr 0.01 --weight-decay 0.01"

# run NAME NP ARGS...: $BIN on NP ranks writing $TMP/NAME.h5 and $TMP/NAME-w.h5; 0 on success.
run() {
  local name=$1 np=$2 out rc
  shift 2
  out=$(timeout 300 $MPIRUN -np "$np" "$BIN" $MODEL "$@" --out "$TMP/$name.h5" --save-weights "$TMP/$name-w.h5" 2>&1)
  rc=$?
  echo "$out" > "$TMP/$name.log"
  if [ $rc -ne 0 ]; then bad "$name: rc=$rc: $(tail -5 <<<"$out")"; return 1; fi
}

# weights_diff A.h5 B.h5: "max=<max |a - b|> bits=<1 if bitwise equal> losses=<1 if training/loss equal bitwise>"
# over the /params of two weights files and the losses of their runs (A-w.h5 -> A.h5).
weights_diff() {
  "$PY" - "$@" <<'PY'
import sys, h5py, numpy as np
a, b = sys.argv[1:3]
m, same, moved = 0.0, True, 0.0
with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
    names = []
    fa["params"].visit(lambda n: names.append(n) if isinstance(fa["params"][n], h5py.Dataset) else None)
    assert names, "no parameters"
    for n in names:
        x, y = fa["params"][n][()], fb["params"][n][()]
        m = max(m, float(np.abs(x.astype(np.float64) - y).max()))
        same = same and (x.view(np.uint32) == y.view(np.uint32)).all()
with h5py.File(a.replace("-w.h5", ".h5"), "r") as ra, h5py.File(b.replace("-w.h5", ".h5"), "r") as rb:
    la, lb = ra["training/loss"][()], rb["training/loss"][()]
    losses = la.shape == lb.shape and (la.view(np.uint64) == lb.view(np.uint64)).all()
print("max=%.3g bits=%d losses=%d" % (m, same, losses))
PY
}

# ---- 1 rank: --shard-optimizer = --no-ddp, bit for bit
for opt in sgd adamw; do
  if [ $opt = sgd ]; then O=$SGD; else O=$ADAMW; fi
  run one-zero-$opt 1 $O $BUCKETS --shard-optimizer && run one-noddp-$opt 1 $O --no-ddp || continue
  d=$(weights_diff "$TMP/one-zero-$opt-w.h5" "$TMP/one-noddp-$opt-w.h5" 2>&1)
  if [[ "$d" == *"bits=1 losses=1"* ]]; then ok "1 rank, $opt: --shard-optimizer = --no-ddp bit for bit ($d)"
  else bad "1 rank, $opt: --shard-optimizer differs from --no-ddp: $d"; fi
done

# ---- 2, 3, 4 ranks: ZeRO-1 = DDP within 1e-6
for np in 2 3 4; do
  for c in sgd adamw adamw-accum; do
    case $c in
      sgd) O=$SGD ;;
      adamw) O=$ADAMW ;;
      adamw-accum) O="$ADAMW --grad-accum-steps 2" ;;
    esac
    run zero-$c-np$np $np $O $BUCKETS --shard-optimizer && run ddp-$c-np$np $np $O $BUCKETS || continue
    d=$(weights_diff "$TMP/zero-$c-np$np-w.h5" "$TMP/ddp-$c-np$np-w.h5" 2>&1)
    m=${d#max=}; m=${m%% *}
    if [[ "$d" == max=* ]] && "$PY" -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 1e-6 else 1)" "$m"; then
      ok "$np ranks, $c: ZeRO-1 final weights within 1e-6 of DDP's ($d)"
    else bad "$np ranks, $c: ZeRO-1 vs DDP: $d"; fi
  done
done

# ---- a non-finite step: skipped on every rank
NAN="--debug-nan-at-step 3 --on-nonfinite skip"
if run zero-nan 3 $ADAMW $BUCKETS $NAN --shard-optimizer && run ddp-nan 3 $ADAMW $BUCKETS $NAN; then
  check=$("$PY" - "$TMP/zero-nan.h5" "$TMP/zero-nan-w.h5" "$TMP/ddp-nan-w.h5" <<'PY' 2>&1
import sys, h5py, numpy as np
r, za, da = sys.argv[1:4]
with h5py.File(r, "r") as f:
    nf = f["training/nonfinite"][()]
    assert nf.shape == (3, 8), nf.shape
    assert (nf[:, 3] == 1).all() and nf[:, [0, 1, 2, 4, 5, 6, 7]].sum() == 0, nf
    assert f["summary/nonfinite_steps"][()] == 1
    ag = f["buckets/allgather_bytes"][()]
    assert (ag[:, 3, :] == 0).all() and (ag[:, 4, :] > 0).all(), "the skipped step gathered nothing"
m = 0.0
with h5py.File(za, "r") as a, h5py.File(da, "r") as b:
    def f(n, o):
        global m
        if isinstance(o, h5py.Dataset): m = max(m, float(np.abs(o[()].astype(np.float64) - b["params"][n][()]).max()))
    a["params"].visititems(f)
assert m <= 1e-6, m
print("ok: step 3 non-finite on ranks 0-2, no all-gather in it, final weights within %.3g of DDP's" % m)
PY
)
  if [[ "$check" == ok* ]]; then ok "NaN in rank 0's batch, 3 ranks: $check"; else bad "non-finite step: $check"; fi
fi

# ---- checkpoints
# ckpt_pair NAME NP_FULL "FULL ARGS" "RESUMED ARGS": the full run (checkpoints after steps 3 and 7) and
# a run resumed from the first; prints the comparison of steps 4..7 and the final checkpoints.
ckpt_pair() {
  local name=$1 np=$2 full=$3 resumed=$4 out rc
  out=$(timeout 300 $MPIRUN -np "$np" "$BIN" $MODEL $BUCKETS $full --checkpoint-every 4 \
        --checkpoint-path "$TMP/$name-{step}.h5" --out "$TMP/$name-full.h5" 2>&1); rc=$?
  if [ $rc -ne 0 ] || [ ! -f "$TMP/$name-8.h5" ]; then echo "full run rc=$rc: $(tail -3 <<<"$out")"; return; fi
  out=$(timeout 300 $MPIRUN -np "$np" "$BIN" $MODEL $BUCKETS $resumed --resume "$TMP/$name-4.h5" --checkpoint-every 4 \
        --checkpoint-path "$TMP/$name-res-{step}.h5" --out "$TMP/$name-res.h5" 2>&1); rc=$?
  if [ $rc -ne 0 ] || ! grep -q "resuming from .*$name-4.h5 at step 4 of 8" <<<"$out"; then
    echo "resumed run rc=$rc: $(tail -3 <<<"$out")"; return
  fi
  "$PY" - "$TMP/$name-full.h5" "$TMP/$name-res.h5" "$TMP/$name-8.h5" "$TMP/$name-res-8.h5" <<'PY' 2>&1
import sys, h5py, numpy as np
full, res, cf, cr = sys.argv[1:5]
with h5py.File(full, "r") as a, h5py.File(res, "r") as b:
    la, lb = a["training/loss"][()], b["training/loss"][()]
    assert (la[:, 4:].view(np.uint64) == lb.view(np.uint64)).all(), ("loss", la[:, 4:], lb)
n = 0
with h5py.File(cf, "r") as a, h5py.File(cr, "r") as b:
    assert a.attrs["optimizer_steps"] == b.attrs["optimizer_steps"]
    names_a, names_b = [], []
    a.visit(names_a.append)
    b.visit(names_b.append)
    assert names_a == names_b, "different datasets"
    for name in names_a:
        if isinstance(a[name], h5py.Dataset):
            x, y = a[name][()], b[name][()]
            assert (x.view(np.uint32 if x.dtype == np.float32 else np.uint64) ==
                    y.view(np.uint32 if y.dtype == np.float32 else np.uint64)).all(), name
            n += 1
print("ok: losses of steps 4-7 and all %d tensors of the step-8 checkpoints bit for bit" % n)
PY
}
A2="$ADAMW --grad-accum-steps 2"
c=$(ckpt_pair zz3 3 "$A2 --shard-optimizer" "$A2 --shard-optimizer")
if [[ "$c" == ok* ]]; then ok "resume sharded -> sharded, 3 ranks, AdamW, accumulation 2: $c"; else bad "sharded -> sharded: $c"; fi
c=$(ckpt_pair zd2 2 "$SGD --shard-optimizer" "$SGD")
if [[ "$c" == ok* ]]; then ok "resume sharded -> DDP, 2 ranks, SGD + momentum: $c"; else bad "sharded -> DDP: $c"; fi
c=$(ckpt_pair dz2 2 "$ADAMW" "$ADAMW --shard-optimizer")
if [[ "$c" == ok* ]]; then ok "resume DDP -> sharded, 2 ranks, AdamW: $c"; else bad "DDP -> sharded: $c"; fi
# The sharded run's checkpoint holds every parameter's optimizer state (the DDP resume above read it whole).
same=$("$PY" - "$TMP/zd2-4.h5" <<'PY' 2>&1
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as a:
    names = []
    a.visit(names.append)
    groups = sorted(n for n in names if n.count("/") == 0)
    assert groups == ["data", "optimizer", "params"], groups
    assert list(a["optimizer"].keys()) == ["momentum_buffer"], list(a["optimizer"].keys())
    assert a.attrs["world_size"] == 2 and a.attrs["option.shard-optimizer"] == "true"
    n = sum(1 for x in names if isinstance(a[x], h5py.Dataset))
    full = sum(a["params"][p].size for p in a["params"])
    mom = sum(a["optimizer/momentum_buffer"][p].size for p in a["optimizer/momentum_buffer"])
    assert mom == full, (mom, full)
print("ok: %d datasets, momentum_buffer of all %d parameters" % (n, full))
PY
)
if [[ "$same" == ok* ]]; then ok "a sharded run's checkpoint holds the full state ($same)"; else bad "sharded checkpoint: $same"; fi
EXPECT_ARGS="$MODEL $BUCKETS" NP=3 expect_error "a 2-rank sharded checkpoint on 3 ranks: refused as for DDP" \
  "ranks: the checkpoint was written by 2 rank(s), this run has 3" $SGD --shard-optimizer --resume "$TMP/zd2-4.h5" \
  --out "$TMP/e-np3.h5"

# ---- the results file and the summary
if [ -f "$TMP/zero-sgd-np3.h5" ] && [ -f "$TMP/ddp-sgd-np3.h5" ]; then
  check=$("$PY" - "$TMP/zero-sgd-np3.h5" "$TMP/ddp-sgd-np3.h5" "$(dirname "$0")/../results" <<'PY' 2>&1
import sys, h5py, numpy as np
z, d = sys.argv[1:3]
with h5py.File(z, "r") as f, h5py.File(d, "r") as g:
    assert f.attrs["collectives"] == "reduce-scatter + all-gather (ZeRO-1)", f.attrs["collectives"]
    assert g.attrs["collectives"] == "all-reduce", g.attrs["collectives"]
    bb = f["buckets/bytes"][()]
    n = len(bb)
    assert n > 3, n
    for name in ("bytes_sent", "allgather_bytes"):
        v = f["buckets/" + name][()]
        assert v.shape == (3, 8, n) and (v == bb[None, None, :]).all(), (name, v[0, 0], bb)
    assert (f["buckets/reduce_scattered"][()] == 1).all() and (g["buckets/reduce_scattered"][()] == 0).all()
    assert (g["buckets/allgather_bytes"][()] == 0).all() and (g["buckets/allgather_time"][()] == 0).all()
    s, e, t = (f["buckets/allgather_" + k][()] for k in ("start", "end", "time"))
    assert (s > 0).all() and (e >= s).all() and np.allclose(t, e - s, rtol=0, atol=1e-9), "all-gather times"
    # After the optimizer: every bucket's all-gather starts after the step's backward ended.
    assert (s >= f["timing/backward_end"][()][:, :, None]).all()
    for series, time, nbytes, factor in (("busbw", "allreduce_time", "bytes_sent", 2 / 3),
                                         ("allgather_busbw", "allgather_time", "allgather_bytes", 2 / 3)):
        bw, tt, by = f["buckets/" + series][()], f["buckets/" + time][()], f["buckets/" + nbytes][()]
        want = np.where(tt > 0, by / np.where(tt > 0, tt, 1) / 1e9 * factor, 0)
        assert np.allclose(bw, want, rtol=1e-12, atol=0), series
    bw_ddp = g["buckets/busbw"][()]
    tt, by = g["buckets/allreduce_time"][()], g["buckets/bytes_sent"][()]
    assert np.allclose(bw_ddp, np.where(tt > 0, by / np.where(tt > 0, tt, 1) / 1e9 * 4 / 3, 0), rtol=1e-12, atol=0)
    summary = float(f["summary/busbw_median"][()])
sys.path.insert(0, sys.argv[3])
from vitddp_tools.bandwidth import BucketBandwidth
from vitddp_tools.reader import Run
with Run(z) as run:
    tools = BucketBandwidth(run).median_busbw()
assert abs(tools - summary) <= 1e-9 * summary, (tools, summary)
print("ok: %d buckets of %d..%d bytes reduce-scattered and all-gathered in every step on 3 ranks, busbw x 2/3, "
      "summary busbw %.4g GB/s = vitddp_tools'" % (n, bb.min(), bb.max(), summary))
PY
)
  if [[ "$check" == ok* ]]; then ok "results file of a 3-rank ZeRO-1 run: $check"; else bad "results file: $check"; fi
  if grep -q "collectives: reduce-scatter + all-gather (ZeRO-1); 0 of .* bucket reduce-scatters started after backward" "$TMP/zero-sgd-np3.log" &&
     grep -q "collectives: all-reduce; .* bucket all-reduces started after backward" "$TMP/ddp-sgd-np3.log"; then
    ok "summary line names the collectives ($(grep -o 'collectives: [^;]*' "$TMP/zero-sgd-np3.log"))"
  else bad "summary line: $(grep collectives "$TMP/zero-sgd-np3.log" "$TMP/ddp-sgd-np3.log")"; fi
fi

# ---- the Chrome trace: reduce-scatters in backward, all-gathers after the optimizer
if run zero-trace 2 $SGD $BUCKETS --shard-optimizer --trace "$TMP/zero.json"; then
  check=$("$PY" - "$TMP/zero.json" <<'PY' 2>&1
import sys, json
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
rs = [e for e in ev if e["name"].startswith("reduce-scatter bucket")]
ag = [e for e in ev if e["name"].startswith("all-gather bucket")]
assert rs and ag and len(rs) == len(ag), (len(rs), len(ag))
assert not [e for e in ev if e["name"].startswith("all-reduce bucket")]
print("ok: %d reduce-scatter and %d all-gather spans" % (len(rs), len(ag)))
PY
)
  if [[ "$check" == ok* ]]; then ok "--trace of a ZeRO-1 run: $check"; else bad "--trace: $check"; fi
fi

# ---- --dry-run: one rank's optimizer state is its shard
out=$(timeout 60 $MPIRUN -np 3 "$BIN" $MODEL $BUCKETS $ADAMW --shard-optimizer --dry-run 2>&1); rc=$?
if [ $rc -eq 0 ] && [ -f "$TMP/zero-adamw-np3.h5" ]; then
  check=$("$PY" -c '
import sys, re, h5py
out = open(sys.argv[2]).read()
bb = h5py.File(sys.argv[1], "r")["buckets/bytes"][()] // 4
slot = sum((int(n) + 2) // 3 for n in bb)
def row(name):
    m = re.search(r"^  %s +(\d+) bytes" % re.escape(name), out, re.M)
    return int(m.group(1)) if m else None
total = int(bb.sum())
want = {"optimizer state": 2 * 4 * slot, "parameters": 4 * total, "gradients": 4 * total, "reducer": 0,
        "shard parameters": None}
got = {k: row(k) for k in want}
assert got == want, (got, want)
assert "of this rank\x27s shard (ZeRO-1, %d of %d elements on 3 rank(s))" % (slot, total) in out, out
print("ok: optimizer state %d = 2 x 4 x %d bytes beside DDP\x27s parameters and gradients (%d each), no master "
      "copy, no reducer buffer" % (got["optimizer state"], slot, 4 * total))
' "$TMP/zero-adamw-np3.h5" <(echo "$out") 2>&1)
  if [[ "$check" == ok* ]]; then ok "--dry-run on 3 ranks: $check"; else bad "--dry-run: $check"; fi
else
  bad "--dry-run --shard-optimizer: rc=$rc: $out"
fi

# ---- refusals
EXPECT_ARGS="$MODEL" expect_error "--shard-optimizer with PowerSGD" \
  "--compression: powersgd: not with --shard-optimizer (PowerSGD all-reduces the low-rank factors" \
  --shard-optimizer --compression powersgd --out "$TMP/e1.h5"
EXPECT_ARGS="$MODEL" expect_error "--shard-optimizer with bf16 compression" \
  "--compression: bf16: not with --shard-optimizer" --shard-optimizer --compression bf16 --out "$TMP/e2.h5"
EXPECT_ARGS="$MODEL" expect_error "--shard-optimizer with --grad-as-bucket-view off" \
  "--grad-as-bucket-view: off: not with --shard-optimizer" --shard-optimizer --grad-as-bucket-view off --out "$TMP/e3.h5"
EXPECT_ARGS="$MODEL" NP=1 expect_error "--shard-optimizer with --no-ddp" \
  "--shard-optimizer: has no effect with --no-ddp" --shard-optimizer --no-ddp --out "$TMP/e4.h5"
for f in e1 e2 e3 e4 e-np3; do [ -e "$TMP/$f.h5" ] && bad "refused run $f left a results file"; done

finish
