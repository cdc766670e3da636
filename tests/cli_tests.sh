#!/usr/bin/env bash
# Command-line behaviour of the real vitddp binary on the CPU backend:
# bad input -> one line naming the option, exit code 2, on 1 and 2 ranks; a CPU run writes a
# complete results file; an existing results file is never overwritten.
# Usage: cli_tests.sh <vitddp binary> <mpirun>
set -u
BIN=$1
source "$(dirname "$0")/test_util.sh" "$2"


expect_error "zero batch" "--batch-size: must be in [1, 65536], got '0'" --batch-size 0
expect_error "negative steps" "--steps: must be in [1," --steps -1
expect_error "unknown model" "--model: unknown value 'vit_x'" --model vit_x
expect_error "unknown option" "unknown option '--bogus'" --bogus
expect_error "unknown option, nearest suggested" "unknown option '--batch-sise' (did you mean --batch-size?)" --batch-sise 4
expect_error "repeated option" "--steps: given twice" --steps 2 --steps 3
expect_error "an option where a value belongs" "--out: expects a value, got the option '--overwrite'" --out --overwrite
expect_error "option without effect" "--powersgd-rank: has no effect without --compression powersgd" --powersgd-rank 2
expect_error "bad bucket size" "--bucket-cap-mb: must be in (0" --bucket-cap-mb 0
expect_error "missing data dir" "--data: directory '$TMP/nope' does not exist" --data idx:$TMP/nope
expect_error "--data naming a file" "--data: '$BIN' is not a directory" --data "idx:$BIN"
expect_error "a path with a newline, escaped: one line" "--data: directory '$TMP/no\npe' does not exist" \
  --data "idx:$TMP/no"$'\n'"pe"
expect_error "no-ddp with 2 ranks" "--no-ddp: trains one replica" --no-ddp --model vit_micro
expect_error "missing output dir" "--out:" --model vit_micro --out $TMP/missing/dir/run.h5
expect_error "NCCL CTA cap on the CPU backend" "--nccl-max-ctas: needs the GPU backend" --nccl-max-ctas 4 --model vit_micro
expect_error "missing --trace dir" "--trace: directory '$TMP/nope' does not exist" --model vit_micro --trace $TMP/nope/t.json
expect_error "missing --save-weights dir" "--save-weights: directory '$TMP/nope' does not exist" --model vit_micro --save-weights $TMP/nope/w.h5
expect_error "unknown precision" "--precision: unknown value 'fp16'" --precision fp16
expect_error "bf16 on the CPU backend" "--precision bf16: needs the GPU backend" --precision bf16 --model vit_micro
expect_error "unknown optimizer" "--optimizer: unknown value 'adam' (choose one of: sgd, adamw)" --optimizer adam
expect_error "momentum with AdamW" "--momentum: has no effect with --optimizer adamw" --optimizer adamw --momentum 0.9
expect_error "AdamW beta2 of 1" "--adam-beta2: must be in [0," --optimizer adamw --adam-beta2 1
expect_error "min-lr without cosine" "--min-lr: has no effect with --lr-schedule constant" --min-lr 0.0001
expect_error "checkpoint over the results file" "is also the --out file" --model vit_micro --out "$TMP/same.h5" --checkpoint-every 2 --checkpoint-path "$TMP/same.h5"
expect_error "cuDNN patch embedding in bf16" "--patch-embed cudnn: not with --precision bf16" --patch-embed cudnn --precision bf16
expect_error "warm-up longer than the cosine" "--lr-warmup-steps: must be less than the cosine schedule's length 14" --lr-schedule cosine --lr-warmup-steps 20
expect_error "cuDNN attention in fp32" "--attention cudnn: needs --precision bf16" --attention cudnn
expect_error "batched-GEMM attention in bf16" "--attention gemm: needs --precision fp32 or tf32" --attention gemm --precision bf16
expect_error "recomputing batched-GEMM attention in bf16" "--attention gemm-recompute: needs --precision fp32 or tf32" \
  --attention gemm-recompute --precision bf16
expect_error "unknown patch embedding" "--patch-embed: unknown value 'fft'" --patch-embed fft
expect_error "cuDNN patch embedding on the CPU backend" "--patch-embed cudnn: needs the GPU backend" --patch-embed cudnn --model vit_micro
expect_error "GEMM SM carveout on the CPU backend" "--gemm-sm-carveout: needs the GPU backend" --gemm-sm-carveout 8 --model vit_micro
expect_error "GEMM autotuning on the CPU backend" "--gemm-autotune: needs the GPU backend" --gemm-autotune 0 --model vit_micro
expect_error "copy-engine all-reduce on the CPU backend" "--allreduce copy-engine: needs the GPU backend" --allreduce copy-engine --model vit_micro
expect_error "CUDA graph switch on the CPU backend" "--cuda-graph off: needs the GPU backend" --cuda-graph off --model vit_micro
expect_error "attention choice on the CPU backend" "--attention custom: needs the GPU backend" --attention custom --model vit_micro
expect_error "3xTF32 GEMMs on the CPU backend" "--fp32-matmul tf32x3: needs the GPU backend" --fp32-matmul tf32x3 --model vit_micro
EXPECT_ARGS="--backend gpu --model vit_micro" expect_error "3xTF32 GEMMs in bf16" \
  "--fp32-matmul tf32x3: has no effect with --precision bf16" --fp32-matmul tf32x3 --precision bf16
expect_error "SGD in backward on the CPU backend" "--optimizer-in-backward: needs the GPU backend" --optimizer-in-backward --no-ddp --model vit_micro
# --optimizer-in-backward's rules hold before any GPU work (so also here, without a GPU).
EXPECT_ARGS="--backend gpu --model vit_micro" expect_error "SGD in backward with DDP" \
  "--optimizer-in-backward: needs --no-ddp" --optimizer-in-backward
for refused in "--optimizer adamw|--optimizer-in-backward: needs --optimizer sgd" \
    "--momentum 0.9|--momentum: 0.9: not with --optimizer-in-backward" \
    "--weight-decay 0.01|--weight-decay: 0.01: not with --optimizer-in-backward" \
    "--grad-accum-steps 2|--grad-accum-steps: 2: not with --optimizer-in-backward" \
    "--on-nonfinite skip|--on-nonfinite: skip: not with --optimizer-in-backward" \
    "--fp32-matmul tf32x3|--fp32-matmul: tf32x3: not with --optimizer-in-backward"; do
  NP=1 EXPECT_ARGS="--backend gpu --model vit_micro --no-ddp --optimizer-in-backward" \
    expect_error "SGD in backward with ${refused%%|*}" "${refused#*|}" ${refused%%|*}
done

# --backend auto (no GPU here: the CPU backend): the GPU-only rules apply once it is resolved, and
# the one line says why auto chose the CPU backend (no "running the CPU backend" notice before it).
if [ "${VITDDP_GPU_BUILT:-1}" = 1 ]; then why="no CUDA device visible"; else why="this build has no GPU backend"; fi
EXPECT_ARGS="--model vit_micro" expect_error "bf16 with --backend auto on a machine without GPU" \
  "--precision bf16: needs the GPU backend (the CPU backend computes in fp32 only); --backend auto chose the CPU backend ($why)" \
  --precision bf16
out=$(timeout 120 $MPIRUN -np 2 "$BIN" --model vit_micro --precision bf16 2>&1)
if ! grep -q "running the CPU backend" <<<"$out"; then ok "a refused --backend auto run prints no backend notice"
else bad "a refused --backend auto run printed: $out"; fi

# --help: exit 0, every option listed, the sections in order.
out=$("$BIN" --help 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q -- "--bucket-cap-mb" <<<"$out" && grep -q -- "--no-overlap" <<<"$out"; then ok "--help"; else bad "--help rc=$rc"; fi
sections=$(grep -E '^[A-Z][A-Za-z ()]+ \(default in brackets\):$' <<<"$out" | sed 's/ (default in brackets)://' | tr '\n' '|')
if [ "$sections" = "Model and data|DDP and communication|Precision and speed|Optimizer and schedule|Outputs|Reliability|Debug (testing only)|" ]
then ok "--help sections in order"; else bad "--help sections: $sections"; fi

# --version: vitddp's commit, then the libraries' versions, on 2 ranks printed once. The CPU-only
# build (VITDDP_GPU_BUILT=0, set by tests/CMakeLists.txt) links no GPU library and lists none.
out=$(timeout 60 $MPIRUN -np 2 "$BIN" --version 2>&1); rc=$?
gpu_libs=0
for lib in "CUDA runtime [0-9]" "CUDA driver " "cuBLASLt [0-9]" "cuDNN [0-9]" "NCCL [0-9]"; do
  if grep -q "^  $lib" <<<"$out"; then gpu_libs=$((gpu_libs + 1)); fi
done
if [ "${VITDDP_GPU_BUILT:-1}" = 1 ]; then want_gpu_libs=5; else want_gpu_libs=0; fi
if [ $rc -eq 0 ] && [ "$(grep -c '^vitddp ' <<<"$out")" = 1 ] && [ $gpu_libs -eq $want_gpu_libs ] \
   && grep -q "^  MPI ." <<<"$out" && grep -q "^  HDF5 [0-9]" <<<"$out"; then ok "--version on 2 ranks: $(echo $out | cut -c1-150)"
else bad "--version rc=$rc (GPU libraries listed: $gpu_libs, wanted $want_gpu_libs): $out"; fi
# A negative value is a value, not an option (--dry-run: the GPU backend's device memory, or,
# with --backend auto and no GPU, as in the CPU-only build, the CPU backend's host memory).
out=$(timeout 60 $MPIRUN -np 2 "$BIN" --model vit_micro --debug-nan-at-step -1 --dry-run 2>&1); rc=$?
if [ "${VITDDP_GPU_BUILT:-1}" = 1 ]; then
  if [ $rc -eq 0 ] && grep -q "peak" <<<"$out"; then ok "--debug-nan-at-step -1 parses (--dry-run on 2 ranks)"; else bad "negative value rc=$rc: $out"; fi
elif [ $rc -eq 0 ] && [ "$(grep -c '^\[vitddp\] host memory per rank of the CPU backend: vit_micro' <<<"$out")" = 1 ] \
     && grep -q "^  peak" <<<"$out"; then
  ok "--debug-nan-at-step -1 parses (--dry-run on 2 ranks, the CPU backend's host memory in the CPU-only build)"
else bad "negative value (CPU-only build) rc=$rc: $out"; fi

# Ranks started with different command lines (MPMD): exit 2 on every rank, one line naming the
# option and the rank, never a hang (also where one rank alone would exit early).
mpmd() {  # mpmd NAME WANT ARGS_OF_RANK_1...: rank 0 gets --backend cpu --model vit_micro only
  local name=$1 want=$2 out rc
  shift 2
  out=$(timeout 60 $MPIRUN -np 1 "$BIN" --backend cpu --model vit_micro : -np 1 "$BIN" --backend cpu --model vit_micro "$@" 2>&1); rc=$?
  if [ $rc -eq 2 ] && grep -qF -- "$want" <<<"$out" && [ "$(grep -c 'vitddp: error' <<<"$out")" = 1 ]; then ok "MPMD $name: exit 2, $(grep -F -- "$want" <<<"$out" | cut -c1-150)"
  else bad "MPMD $name: rc=$rc, wanted exit 2 and '$want', got: $out"; fi
}
mpmd "--dry-run on rank 1 only" "ranks were started with different options: --dry-run differs on rank 1" --dry-run
mpmd "--version on rank 1 only" "--version differs on rank 1" --version
mpmd "--help on rank 1 only" "--help differs on rank 1" --help
mpmd "a bad value on rank 1 only" "--batch-size differs on rank 1" --batch-size 0
mpmd "another value on rank 1" "--steps differs on rank 1" --steps 7

# A real CPU run on 2 ranks: exit 0, progress lines, summary, datasets in the file.
out=$(timeout 300 $MPIRUN -np 2 "$BIN" --backend cpu --model vit_micro --batch-size 4 --warmup-steps 1 --steps 3 \
      --cooldown-steps 1 --bucket-cap-mb 0.001 --first-bucket-mb 0.0005 --out "$TMP/run.h5" --trace "$TMP/run.json" 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q "step 4 (5/5 done, cool-down)" <<<"$out" && grep -q "steps/s per rank" <<<"$out"; then ok "CPU run on 2 ranks"
else bad "CPU run rc=$rc: $out"; fi
# The progress line (--progress-every auto): this run's first step and its last, steps numbered from
# 0; elapsed, ETA, steps/s, images/s, loss.
progress=$(grep "^\[vitddp\] step " <<<"$out")
if [ "$(wc -l <<<"$progress")" = 2 ] &&
   grep -qE '^\[vitddp\] step 0 \(1/5 done, warm-up\) elapsed [0-9.]+ s, ETA [0-9.]+ s, [0-9.]+ steps/s, [0-9.]+ images/s, loss [0-9.]+, lr ' <<<"$progress" &&
   grep -qE '^\[vitddp\] step 4 \(5/5 done, cool-down\) elapsed [0-9.]+ s, ETA 0.0 s, ' <<<"$progress"; then
  ok "progress lines (auto): first and last step"
else bad "progress lines: $progress"; fi
# The timed-window line: the step-time spread and the median bus bandwidth; the same in /summary.
line=$(grep "^\[vitddp\] timed window:" <<<"$out")
if grep -qE 'median step [0-9.]+ ms \(min [0-9.]+, p90 [0-9.]+, max [0-9.]+, cv [0-9.]+\); median busbw [0-9.e+-]+ GB/s$' <<<"$line"; then
  ok "timed-window line: step-time spread, busbw"
else bad "timed-window line: '$line'"; fi
check=$(/usr/bin/python3 - "$TMP/run.h5" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f:
    t = f["timing/step_time"][0][f["steps/timed"][0] == 1]
    s = {k: float(f["summary/" + k][()]) for k in ("step_time_min", "step_time_p90", "step_time_max", "step_time_cv", "median_step_time")}
    assert f["summary/step_time_cv"].attrs["units"] == "1" and f["summary/busbw_median"].attrs["units"] == "GB/s"
want = {"step_time_min": t.min(), "step_time_p90": np.percentile(t, 90), "step_time_max": t.max(),
        "step_time_cv": np.std(t) / np.mean(t), "median_step_time": np.sort(t)[t.size // 2]}
for k, v in want.items():
    assert abs(s[k] - v) <= 1e-12 * max(abs(v), 1e-30), (k, s[k], v)
print("ok", {k: "%.3g" % v for k, v in s.items()})
PY
)
if [[ "$check" == ok* ]]; then ok "summary step-time spread = numpy's: $check"; else bad "summary step-time spread: $check"; fi
# --progress-every N: after every N-th step and the last.
out=$(timeout 300 $MPIRUN -np 2 "$BIN" --backend cpu --model vit_micro --batch-size 4 --warmup-steps 1 --steps 3 \
      --cooldown-steps 1 --progress-every 2 --out "$TMP/every2.h5" 2>&1); rc=$?
steps=$(grep -o "^\[vitddp\] step [0-9]*" <<<"$out" | awk '{print $3}' | tr '\n' ' ')
if [ $rc -eq 0 ] && [ "$steps" = "1 3 4 " ]; then ok "--progress-every 2: steps $steps"; else bad "--progress-every 2: rc=$rc steps '$steps': $out"; fi
if command -v h5ls >/dev/null; then
  listing=$(h5ls -r "$TMP/run.h5" 2>&1)
  for d in /timing/forward /timing/backward /timing/exposed_comm /buckets/allreduce_start /buckets/allreduce_end /buckets/bytes /training/loss /summary/steps_per_second; do
    if grep -q "^$d " <<<"$listing"; then ok "dataset $d"; else bad "dataset $d missing: $listing"; fi
  done
  if grep -q "^/timing/forward .*{2, 5/Inf}" <<<"$listing"; then ok "forward is [2 ranks, 5 steps]"; else bad "forward shape: $(grep ^/timing/forward <<<"$listing")"; fi
else
  bad "h5ls not installed (hdf5-tools)"
fi

# AdamW with warm-up + cosine: the learning rate of every step is in training/lr.
out=$(timeout 300 $MPIRUN -np 2 "$BIN" --backend cpu --model vit_micro --batch-size 4 --warmup-steps 1 --steps 3 \
      --cooldown-steps 1 --optimizer adamw --lr 0.01 --lr-schedule cosine --lr-warmup-steps 2 --out "$TMP/adamw.h5" 2>&1); rc=$?
lrs=$(/usr/bin/python3 -c "import h5py,sys; print(' '.join('%g' % x for x in h5py.File(sys.argv[1],'r')['training/lr'][0]))" "$TMP/adamw.h5" 2>&1)
# 5 steps: warm-up 0, 0.005; cosine from 0.01 over steps 2..5: 0.01, 0.0075, 0.0025
if [ $rc -eq 0 ] && [ "$lrs" = "0 0.005 0.01 0.0075 0.0025" ]; then ok "AdamW + cosine run, training/lr = $lrs"
else bad "AdamW run rc=$rc lr='$lrs': $out"; fi

# --record-grad-ready: when backward reported each gradient-ready group, on 2 DDP ranks and on 1
# rank without DDP (the predictor's 1-GPU baseline). Every step's times increase along the group
# axis and lie inside backward ([input_wait + forward, backward_end]); the groups' bytes sum to
# the layout's total (the bucket table's bytes), the complete prefix ends there; 6 x 2 + 4 = 16
# groups for vit_micro; a run without the option has no grad_ready group.
grad_ready_check() {  # grad_ready_check FILE RANKS
  /usr/bin/python3 - "$1" "$2" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f:
    ranks = int(sys.argv[2])
    d = f["grad_ready/ready_time"]
    assert d.shape == (ranks, 5, 16) and d.attrs["axes"] == "rank,step,group" and d.attrs["units"] == "s", (d.shape, dict(d.attrs))
    t = d[()]
    start = (f["timing/input_wait"][()] + f["timing/forward"][()])[:, :, None]
    end = f["timing/backward_end"][()][:, :, None]
    assert (np.diff(t, axis=2) > 0).all(), t
    assert (t >= start).all() and (t <= end).all(), (t.min(), start.min(), t.max(), end.max())
    nbytes, prefix, buckets = f["grad_ready/bytes"][()], f["grad_ready/prefix_bytes"][()], f["buckets/bytes"][()]
    assert nbytes.sum() == buckets.sum() == prefix[-1] == 4 * (1701 + 3), (nbytes.sum(), buckets.sum(), prefix[-1])
    assert (np.diff(prefix) > 0).all() and list(f["grad_ready/num_tensors"][()]) == [2] * 16
    first = f["grad_ready/first_param"].asstr()[()]
    assert first[0] == "heads.head.bias" and first[-1] == "conv_proj.bias", first
print("ok: %d ranks x 5 steps x 16 groups, %.3f-%.3f ms into backward, %d bytes" % (
    ranks, (t - start).min() * 1e3, (t - start).max() * 1e3, nbytes.sum()))
PY
}
out=$(timeout 300 $MPIRUN -np 2 "$BIN" --backend cpu --model vit_micro --batch-size 4 --warmup-steps 1 --steps 3 \
      --cooldown-steps 1 --bucket-cap-mb 0.001 --first-bucket-mb 0.0005 --record-grad-ready --out "$TMP/ready.h5" 2>&1); rc=$?
check=$(grad_ready_check "$TMP/ready.h5" 2 2>&1)
if [ $rc -eq 0 ] && [[ "$check" == ok* ]]; then ok "--record-grad-ready on 2 ranks: $check"; else bad "--record-grad-ready rc=$rc: $check $out"; fi
out=$(timeout 300 $MPIRUN -np 1 "$BIN" --backend cpu --model vit_micro --batch-size 4 --warmup-steps 1 --steps 3 \
      --cooldown-steps 1 --no-ddp --record-grad-ready --out "$TMP/ready1.h5" 2>&1); rc=$?
check=$(grad_ready_check "$TMP/ready1.h5" 1 2>&1)
if [ $rc -eq 0 ] && [[ "$check" == ok* ]]; then ok "--record-grad-ready --no-ddp on 1 rank: $check"; else bad "--record-grad-ready --no-ddp rc=$rc: $check $out"; fi
if ! h5ls -r "$TMP/run.h5" | grep -q "^/grad_ready"; then ok "no grad_ready/* without --record-grad-ready"
else bad "grad_ready/* in a run without --record-grad-ready"; fi

# The Chrome trace: valid JSON, 2 processes, 5 "Batch i" (i = 0..4) per rank, one all-reduce per
# bucket and step; then tests/trace_check.py: ts >= 0, per track disjoint or nested, named ranks
# and tracks (Perfetto draws it), with 6 buckets whose all-reduces overlap (MPI_Iallreduce).
nb=$(h5ls -r "$TMP/run.h5" | grep '^/buckets/bytes ' | sed 's/.*{\([0-9]*\)}.*/\1/')
check=$(/usr/bin/python3 - "$TMP/run.json" "$nb" <<'PY'
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
nb = int(sys.argv[2])
x = [e for e in ev if e["ph"] == "X"]
for r in (0, 1):
    batches = [e for e in x if e["pid"] == r and e["name"].startswith("Batch ")]
    ar = [e for e in x if e["pid"] == r and e["name"].startswith("all-reduce bucket")]
    fw = [e for e in x if e["pid"] == r and e["name"] == "forward"]
    assert len(batches) == 5 and len(fw) == 5, (r, len(batches), len(fw))
    assert sorted(e["name"] for e in batches) == ["Batch %d" % i for i in range(5)], batches
    assert len(ar) == 5 * nb, (r, len(ar), nb)
    assert all(e["dur"] >= 0 for e in x)
assert nb >= 4, nb
print("ok", len(x), "events,", nb, "buckets")
PY
)
if [[ "$check" == ok* ]]; then check="$check; $(/usr/bin/python3 "$(dirname "$0")/trace_check.py" "$TMP/run.json" 2 2>&1)"; fi
if [[ "$check" == ok*"; ok: "* ]]; then ok "Chrome trace: $check"; else bad "Chrome trace: $check"; fi
# trace_check.py itself: overlapping events on one track, a negative time, an unnamed rank fail.
tc() { /usr/bin/python3 "$(dirname "$0")/trace_check.py" "$TMP/bad.json" 1 >/dev/null 2>&1; echo $?; }
meta='{"name":"process_name","ph":"M","pid":0,"tid":0,"args":{"name":"rank 0"}},{"name":"thread_name","ph":"M","pid":0,"tid":0,"args":{"name":"t"}}'
echo "{\"traceEvents\":[$meta,{\"name\":\"a\",\"ph\":\"X\",\"pid\":0,\"tid\":0,\"ts\":0,\"dur\":10},{\"name\":\"b\",\"ph\":\"X\",\"pid\":0,\"tid\":0,\"ts\":5,\"dur\":10}]}" >"$TMP/bad.json"; r1=$(tc)
echo "{\"traceEvents\":[$meta,{\"name\":\"a\",\"ph\":\"X\",\"pid\":0,\"tid\":0,\"ts\":-1,\"dur\":10}]}" >"$TMP/bad.json"; r2=$(tc)
echo '{"traceEvents":[{"name":"a","ph":"X","pid":0,"tid":0,"ts":0,"dur":10}]}' >"$TMP/bad.json"; r3=$(tc)
echo "{\"traceEvents\":[$meta,{\"name\":\"a\",\"ph\":\"X\",\"pid\":0,\"tid\":0,\"ts\":0,\"dur\":10},{\"name\":\"b\",\"ph\":\"X\",\"pid\":0,\"tid\":0,\"ts\":2,\"dur\":3},{\"name\":\"c\",\"ph\":\"X\",\"pid\":0,\"tid\":0,\"ts\":10,\"dur\":1}]}" >"$TMP/bad.json"; r4=$(tc)
if [ "$r1 $r2 $r3 $r4" = "1 1 1 0" ]; then ok "trace_check.py: refuses overlap, negative ts, unnamed rank; accepts nesting"
else bad "trace_check.py exit codes (overlap, negative, unnamed, nested): $r1 $r2 $r3 $r4"; fi
# An existing trace file is refused without --overwrite, before any work.
expect_error "existing --trace file" "--trace: '$TMP/run.json' exists (use --overwrite to replace it)" --model vit_micro --trace "$TMP/run.json" --out "$TMP/t2.h5"

# Weights: --save-weights writes torchvision-named parameters, --init-from reads them back; bad
# weights files are refused before any work with exit 2 naming --init-from.
out=$(timeout 120 $MPIRUN -np 2 "$BIN" --backend cpu --model vit_micro --batch-size 4 --warmup-steps 0 --steps 2 \
      --cooldown-steps 0 --out "$TMP/w1.h5" --save-weights "$TMP/weights.h5" 2>&1); rc=$?
if [ $rc -eq 0 ] && h5ls -r "$TMP/weights.h5" | grep -q "^/params/heads.head.weight "; then ok "--save-weights wrote /params/<torchvision name>"
else bad "--save-weights rc=$rc: $out"; fi
out=$(timeout 120 $MPIRUN -np 2 "$BIN" --backend cpu --model vit_micro --batch-size 4 --warmup-steps 0 --steps 1 \
      --cooldown-steps 0 --out "$TMP/w2.h5" --init-from "$TMP/weights.h5" 2>&1); rc=$?
if [ $rc -eq 0 ]; then ok "--init-from the saved weights"; else bad "--init-from rc=$rc: $out"; fi
expect_error "missing weights file" "--init-from:" --model vit_micro --init-from "$TMP/none.h5" --out "$TMP/w3.h5"
echo "not hdf5" > "$TMP/corrupt.h5"
expect_error "corrupt weights file" "--init-from:" --model vit_micro --init-from "$TMP/corrupt.h5" --out "$TMP/w4.h5"
expect_error "weights of another model" "parameter" --model vit_tiny --init-from "$TMP/weights.h5" --out "$TMP/w5.h5"
expect_error "existing --save-weights file" "--save-weights:" --model vit_micro --save-weights "$TMP/weights.h5" --out "$TMP/w6.h5"

# The existing file is refused and left untouched.
sum_before=$(md5sum "$TMP/run.h5" | cut -d' ' -f1)
expect_error "existing results file" "--out: '$TMP/run.h5' exists (use --overwrite to replace it)" --model vit_micro --out "$TMP/run.h5"
sum_after=$(md5sum "$TMP/run.h5" | cut -d' ' -f1)
if [ "$sum_before" = "$sum_after" ]; then ok "existing file untouched"; else bad "existing file was modified"; fi
mkdir -p "$TMP/outdir"
expect_error "--out is a directory" "--out: '$TMP/outdir' is a directory" --model vit_micro --out "$TMP/outdir"
expect_error "--out is a directory, with --overwrite" "is a directory" --model vit_micro --out "$TMP/outdir" --overwrite
if [ -d "$TMP/outdir" ]; then ok "directory given as --out left alone"; else bad "directory given as --out removed"; fi
# A set-up that fails after the start-up checks (the GPU backend without a GPU, or, on a GPU, a
# batch that does not fit; a build without the GPU backend refuses earlier) leaves the file
# --overwrite would replace as it was: the results file is created once the engine is up. One
# line, exit 2 on every rank.
out=$(timeout 120 $MPIRUN -np 3 "$BIN" --backend gpu --model vit_h_14 --batch-size 65536 --steps 2 --warmup-steps 1 \
  --out "$TMP/run.h5" --overwrite 2>&1); rc=$?
sum_after=$(md5sum "$TMP/run.h5" | cut -d' ' -f1)
if [ $rc -eq 2 ] && [ "$sum_before" = "$sum_after" ] && [ "$(grep -c 'error' <<<"$out")" = 1 ]; then
  ok "failed set-up with --overwrite: existing file untouched ($(grep error <<<"$out" | cut -c1-120))"
else bad "failed set-up with --overwrite: rc=$rc, file $( [ "$sum_before" = "$sum_after" ] && echo kept || echo changed), got: $out"; fi

finish
