#!/usr/bin/env bash
# vitddp-plot and vitddp-report (vitddp_tools, pip install ./results) on real vitddp files: makes
# HDF5 files with the CPU backend (vit_micro, 1 warm-up + 3 timed + 1 cool-down steps; 2 ranks at
# three bucket sizes, 1 rank at one), runs every plot subcommand and checks what comes out: the
# summary table (header, one row per file, world sizes), every plot file (exists, non-empty, PNG
# signature or SVG root element), the comm lane's name for each recorded transport, and the errors
# (exit 2 with one line naming the missing file / dataset); vitddp-report summary and compare on
# those files; then vitddp-report speed's ratios on one of those files and vitddp-report power on
# hand-written nvidia-smi samples; and the old script paths (results/vitddp_plot.py, ...), which
# run the same code.
# Usage: test_plot.sh <vitddp binary> <mpirun> <python3> <results/vitddp_plot.py>
# The console scripts come from $VITDDP_TOOLS_BIN (CTest: the build tree's venv, fixture
# vitddp_tools); without it they are installed into a venv in the temporary folder.
set -u
BIN=$1
source "$(dirname "$0")/test_util.sh" "$2"
PY=$3
PLOT=$4
if [ -z "${VITDDP_TOOLS_BIN:-}" ]; then
  bash "$(dirname "$0")/python/install_tools.sh" "$PY" "$(dirname "$PLOT")" "$TMP/venv" >/dev/null || { bad "install vitddp_tools"; finish; exit; }
  VITDDP_TOOLS_BIN=$TMP/venv/bin
fi
VPLOT=$VITDDP_TOOLS_BIN/vitddp-plot
VREPORT=$VITDDP_TOOLS_BIN/vitddp-report

# run_cpu NP CAP NAME: a short CPU-backend run writing $TMP/NAME.h5.
run_cpu() {
  local out rc
  out=$(timeout 300 $MPIRUN -np "$1" "$BIN" --backend cpu --model vit_micro --batch-size 4 --warmup-steps 1 \
        --steps 3 --cooldown-steps 1 --bucket-cap-mb "$2" --first-bucket-mb 0.0005 --out "$TMP/$3.h5" 2>&1)
  rc=$?
  if [ $rc -eq 0 ] && [ -s "$TMP/$3.h5" ]; then ok "vitddp -np $1 --bucket-cap-mb $2 -> $3.h5"
  else bad "vitddp -np $1 --bucket-cap-mb $2: rc=$rc: $out"; fi
}
run_cpu 2 0.0005 np2-cap0.0005
run_cpu 2 0.002 np2-cap0.002
run_cpu 2 0.01 np2-cap0.01
run_cpu 1 0.002 np1-cap0.002
FILES=("$TMP/np1-cap0.002.h5" "$TMP/np2-cap0.0005.h5" "$TMP/np2-cap0.002.h5" "$TMP/np2-cap0.01.h5")

# is_svg FILE (is_png comes from test_util.sh)
is_svg() { [ -s "$1" ] && grep -q "<svg" "$1"; }

# ---- summary
out=$("$VPLOT" summary "${FILES[@]}" -o "$TMP/summary.md" 2>"$TMP/err"); rc=$?
header='| file | model | world size | backend | precision | bucket cap (MiB) | compression | overlap | ddp | steps/s per rank | images/s | TFLOP/s per rank | median step (ms) | exposed comm rank 0 (ms) | exposed comm max rank (ms) | speed-up |'
if [ $rc -eq 0 ] && [ "$(head -1 <<<"$out")" = "$header" ]; then ok "summary: header"
else bad "summary: rc=$rc, header: $(head -1 <<<"$out") $(cat "$TMP/err")"; fi
rows=$(grep -c '^| np[12]-cap' <<<"$out")
if [ "$rows" -eq 4 ]; then ok "summary: one row per file (4)"; else bad "summary: $rows rows: $out"; fi
# world size is the 3rd column (field 4 when splitting on '|'); file order is kept
ws=$(grep '^| np[12]-cap' <<<"$out" | awk -F'|' '{gsub(/ /, "", $4); printf "%s ", $4}')
if [ "$ws" = "1 2 2 2 " ]; then ok "summary: world sizes 1 2 2 2"; else bad "summary: world sizes '$ws'"; fi
caps=$(grep '^| np[12]-cap' <<<"$out" | awk -F'|' '{gsub(/ /, "", $7); printf "%s ", $7}')
if [ "$caps" = "0.002 0.0005 0.002 0.01 " ]; then ok "summary: bucket caps"; else bad "summary: bucket caps '$caps'"; fi
first=$(grep '^| np1-cap' <<<"$out" | awk -F'|' '{gsub(/ /, "", $17); print $17}')
if [ "$first" = "1.00x" ]; then ok "summary: speed-up of the first row is 1.00x"; else bad "summary: first speed-up '$first'"; fi
if cmp -s <(echo "$out") "$TMP/summary.md"; then ok "summary -o writes the same table"; else bad "summary -o differs"; fi
out=$("$VPLOT" summary "${FILES[1]}" --baseline "${FILES[0]}" --no-notes 2>&1); rc=$?
if [ $rc -eq 0 ] && [ "$(wc -l <<<"$out")" -eq 3 ]; then ok "summary --baseline --no-notes: 3 lines"
else bad "summary --baseline: rc=$rc $out"; fi

# ---- plots
check_plot() {  # NAME CHECKER FILE COMMAND...
  local name=$1 checker=$2 file=$3
  shift 3
  local out rc
  out=$("$VPLOT" "$@" 2>&1); rc=$?
  if [ $rc -eq 0 ] && $checker "$file"; then ok "$name ($(stat -c %s "$file") bytes)"
  else bad "$name: rc=$rc, file $(ls -la "$file" 2>&1): $out"; fi
}
check_plot "phases PNG" is_png "$TMP/phases.png" phases "${FILES[2]}" -o "$TMP/phases.png"
check_plot "phases SVG" is_svg "$TMP/phases.svg" phases "${FILES[0]}" "${FILES[2]}" -o "$TMP/phases.svg"
check_plot "timeline PNG (steps 1,2)" is_png "$TMP/timeline.png" timeline "${FILES[1]}" --steps 1,2 -o "$TMP/timeline.png"
check_plot "timeline SVG (1 rank, default steps)" is_svg "$TMP/timeline1.svg" timeline "${FILES[0]}" -o "$TMP/timeline1.svg"
check_plot "sweep PNG" is_png "$TMP/sweep.png" sweep "${FILES[1]}" "${FILES[2]}" "${FILES[3]}" -o "$TMP/sweep.png"
check_plot "scaling PNG (--format both)" is_png "$TMP/scaling.png" scaling "${FILES[0]}" "${FILES[2]}" -o "$TMP/scaling" --format both
if is_svg "$TMP/scaling.svg"; then ok "scaling SVG (--format both)"; else bad "scaling.svg missing"; fi
check_plot "busbw PNG (one file)" is_png "$TMP/busbw.png" busbw "${FILES[2]}" -o "$TMP/busbw.png"
check_plot "busbw SVG (the sweep)" is_svg "$TMP/busbw.svg" busbw "${FILES[1]}" "${FILES[2]}" "${FILES[3]}" -o "$TMP/busbw.svg"

# ---- the comm lane's name from the recorded transport (GPU runs; CI has none, so stand-in runs)
names=$("$VITDDP_TOOLS_BIN/python" - <<'PYEOF'
from vitddp_tools import plot
class Run:
    def __init__(self, backend, transport):
        self.backend, self.transport = backend, transport
    def attr(self, key, default):
        return self.transport if key == "nccl_transport" else default
for backend, tr in (("gpu", "P2P [P2P/CUMEM/read]"), ("gpu", "copy-engine (CUDA IPC peer-to-peer copies; NCCL: none)"),
                    ("gpu", None), ("gpu", "unknown"), ("cpu", None)):
    print(plot.comm_name(Run(backend, tr), 0), end="|")
PYEOF
)
if [ "$names" = "NCCL P2P|copy-engine|NCCL|NCCL|MPI|" ]; then ok "comm lane names: $names"
else bad "comm lane names: '$names'"; fi

# ---- --help of every subcommand
for sub in summary phases timeline sweep scaling eval busbw; do
  out=$("$VPLOT" $sub --help 2>&1); rc=$?
  if [ $rc -eq 0 ] && grep -q "usage: vitddp-plot $sub" <<<"$out"; then ok "$sub --help"; else bad "$sub --help rc=$rc"; fi
done
for sub in summary compare buckets overlap speed power kernels losses article; do
  out=$("$VREPORT" $sub --help 2>&1); rc=$?
  if [ $rc -eq 0 ] && grep -q "usage: vitddp-report $sub" <<<"$out"; then ok "vitddp-report $sub --help"; else bad "vitddp-report $sub --help rc=$rc: $out"; fi
done

# ---- errors: exit 2, one line naming the culprit
expect_plot_error() {  # NAME WANT COMMAND...: the plot tool exits 2 with one line
  local name=$1 want=$2
  shift 2
  local out rc
  out=$("$VPLOT" "$@" 2>&1); rc=$?
  if [ $rc -eq 2 ] && [ "$(wc -l <<<"$out")" -eq 1 ] && grep -qF -- "$want" <<<"$out"; then ok "$name (exit 2: $out)"
  else bad "$name: rc=$rc, wanted exit 2 and one line with '$want', got: $out"; fi
}
expect_plot_error "missing file" "$TMP/nope.h5: no such file" summary "${FILES[0]}" "$TMP/nope.h5"
"$PY" - "${FILES[2]}" "$TMP/partial.h5" <<'EOF'
import sys, h5py
with h5py.File(sys.argv[1], "r") as f, h5py.File(sys.argv[2], "w") as g:
    for k, v in f.attrs.items():
        g.attrs[k] = v
    for grp in ("steps", "buckets", "summary"):
        f.copy(grp, g)
    f.copy("timing/forward", g, name="timing/forward")  # no timing/backward etc.
EOF
expect_plot_error "missing dataset" "partial.h5: missing dataset 'timing/data_wait'" phases "$TMP/partial.h5" -o "$TMP/p.png"
expect_plot_error "missing dataset (summary)" "partial.h5: missing dataset 'timing/exposed_comm'" summary "$TMP/partial.h5"
echo "not hdf5" >"$TMP/text.h5"
expect_plot_error "not an HDF5 file" "text.h5: cannot open as HDF5" sweep "$TMP/text.h5" -o "$TMP/s.png"
expect_plot_error "bad output extension" "must end in .png or .svg" phases "${FILES[2]}" -o "$TMP/x.pdf"
expect_plot_error "step out of range" "--steps: step 7 is not in" timeline "${FILES[1]}" --steps 7 -o "$TMP/t.png"

# ---- vitddp-report summary / compare on the CPU runs: images/s = steps/s x batch 4 x ranks, one
# 2-rank run's busbw against its own bytes and times (nccl-tests' factor 2(n-1)/n = 1), the options
# that differ and the ratio to the first file
"$VREPORT" summary "${FILES[0]}" "${FILES[2]}" --json >"$TMP/summary.json" 2>"$TMP/err"; rc=$?
check=$("$VITDDP_TOOLS_BIN/python" - "${FILES[2]}" "$TMP/summary.json" 2>&1 <<'PYEOF'
import json, sys
import h5py, numpy as np
doc = json.load(open(sys.argv[2]))
one, two = doc["runs"]
with h5py.File(sys.argv[1], "r") as f:
    sps = float(f["summary/steps_per_second"][()])
    timed = f["steps/timed"][0] == 1
    nbytes = f["buckets/bytes_sent"][0][timed].sum(axis=1)
    secs = f["buckets/allreduce_time"][()][:, timed].mean(axis=0).sum(axis=1)
want = float(np.median(nbytes / secs / 1e9))
assert one["world_size"] == 1 and two["world_size"] == 2, (one["world_size"], two["world_size"])
assert abs(two["images_per_second"] - sps * 4 * 2) < 1e-9 * sps, (two["images_per_second"], sps)
assert abs(two["busbw_gbps"] - want) <= 1e-9 * want, (two["busbw_gbps"], want)
assert one["busbw_gbps"] is None
print("ok %.4g GB/s" % want)
PYEOF
)
if [ $rc -eq 0 ] && [[ $check == ok* ]]; then ok "vitddp-report summary --json: images/s, busbw ($check), 1 rank: none"
else bad "vitddp-report summary --json: rc=$rc $check $(cat "$TMP/err")"; fi
# The trainer's own bandwidth figures against vitddp_tools.bandwidth on a 2-rank run with many
# buckets: buckets/busbw = per_rank_busbw (each rank's bytes_sent / allreduce_time / 1e9 x 1), and
# summary/busbw_median = BucketBandwidth.median_busbw (median of the byte-weighted step busbw).
check=$("$VITDDP_TOOLS_BIN/python" - "${FILES[1]}" 2>&1 <<'PYEOF'
import sys
import numpy as np
from vitddp_tools.bandwidth import BucketBandwidth, per_rank_busbw
from vitddp_tools.reader import Run
with Run(sys.argv[1]) as run:
    stored = np.asarray(run.bucket_series("buckets/busbw"), dtype=float)
    mine = per_rank_busbw(run)
    nb = stored.shape[2]
    assert nb >= 4 and stored.shape == mine.shape, (stored.shape, mine.shape)
    assert (stored > 0).any() and np.allclose(stored, mine, rtol=1e-12, atol=0), np.abs(stored - mine).max()
    py = BucketBandwidth(run).median_busbw()
    cpp = run.summary("busbw_median")
    assert py is not None and abs(cpp - py) <= 1e-9 * py, (cpp, py)
print("ok %d buckets, median busbw %.4g GB/s (file) = %.4g GB/s (vitddp_tools)" % (nb, cpp, py))
PYEOF
)
if [[ $check == ok* ]]; then ok "buckets/busbw and summary/busbw_median agree with vitddp_tools.bandwidth: $check"
else bad "busbw of the trainer vs vitddp_tools.bandwidth: $check"; fi
out=$("$VREPORT" compare "${FILES[1]}" "${FILES[3]}" 2>"$TMP/err"); rc=$?
if [ $rc -eq 0 ] && grep -qF "| bucket cap (MiB) | 0.0005 | 0.01 |" <<<"$out" && grep -q "^| steps/s | [0-9.]* | [0-9.]* ([0-9.]*x) |" <<<"$out"; then
  ok "vitddp-report compare: the bucket cap differs, steps/s with its ratio"
else bad "vitddp-report compare: rc=$rc $out $(cat "$TMP/err")"; fi
out=$("$VREPORT" summary "$TMP/nope.h5" 2>&1); rc=$?
if [ $rc -eq 2 ] && [ "$out" = "vitddp-report: error: $TMP/nope.h5: no such file" ]; then ok "vitddp-report: a missing file, exit 2"
else bad "vitddp-report missing file: rc=$rc $out"; fi

# ---- the old paths run the same code with the system python3 (no install)
out=$("$PY" "$PLOT" summary "${FILES[@]}" --no-notes 2>&1); rc=$?
if [ $rc -eq 0 ] && [ "$(head -1 <<<"$out")" = "$header" ] && [ "$(wc -l <<<"$out")" -eq 6 ]; then ok "results/vitddp_plot.py summary"
else bad "results/vitddp_plot.py summary: rc=$rc $out"; fi
out=$("$PY" "$PLOT" busbw --help 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q "usage: vitddp_plot.py busbw" <<<"$out"; then ok "results/vitddp_plot.py busbw --help"; else bad "vitddp_plot.py --help: $out"; fi
if [ "$("$PY" "$(dirname "$PLOT")/overlap_table.py" "${FILES[2]}")" = "$("$VREPORT" overlap "${FILES[2]}")" ]; then
  ok "results/overlap_table.py = vitddp-report overlap"; else bad "overlap_table.py differs from vitddp-report overlap"; fi

# ---- vitddp-report speed (results/commands/speed.sh's table): a CPU run standing in for the 1-GPU fp32 run
# and a PyTorch result of 6.005 steps/s; the ratio to it and to the fixed reference 12.01 of docs/benchmarks.md.
SPEED=$(dirname "$PLOT")/speed_table.py  # the old path, compared with vitddp-report speed below
mkdir -p "$TMP/bench"
cp "${FILES[0]}" "$TMP/bench/vitddp-fp32-graph.h5"
echo '{"steps_per_s": 6.005, "torch": "2.x", "images_per_s": 24.0, "tflops": 0.7, "peak_mem_allocated_bytes": 1073741824}' \
  >"$TMP/bench/torch-fp32.json"
sps=$("$PY" -c 'import sys, h5py; print(float(h5py.File(sys.argv[1], "r")["summary/steps_per_second"][()]))' "${FILES[0]}")
out=$("$VREPORT" speed "$TMP/bench" 2>"$TMP/err"); rc=$?
want=$(awk -v s="$sps" 'BEGIN { printf "| %.2fx (>= 1.1x) | %.2fx (12.01) |", s / 6.005, s / 12.01 }')
if [ $rc -eq 0 ] && grep "^| fp32 | vitddp, CUDA graph |" <<<"$out" | grep -qF "$want"; then
  ok "speed_table: the ratio to the job's PyTorch and to the reference figure ($want)"
else bad "speed_table: rc=$rc, want '$want' in: $(grep '^| fp32' <<<"$out") $(cat "$TMP/err")"; fi
if grep "^| fp32 | PyTorch 2.x |" <<<"$out" | grep -qF "| 1 | 0.50x |"; then ok "speed_table: PyTorch's row against the reference figure (0.50x)"
else bad "speed_table: PyTorch row: $(grep '^| fp32 | PyTorch' <<<"$out")"; fi
if grep -q "^| tf32 | vitddp, CUDA graph | n/a |" <<<"$out"; then ok "speed_table: missing files give n/a"
else bad "speed_table: tf32 row: $(grep '^| tf32 | vitddp, CUDA' <<<"$out")"; fi
# GPU 1's 1-GPU file and a 2-GPU copy-engine file (copies of CPU runs with summary/steps_per_second
# set; GPU 0's file set to 100): the 2-GPU share (40 steps/s) of GPU 0's figure and of the slower
# GPU's, with GPU 1 slower (50) and faster (400) than GPU 0; without GPU 1's file the second is n/a.
set_sps() { "$PY" -c 'import sys, h5py; h5py.File(sys.argv[1], "r+")["summary/steps_per_second"][()] = float(sys.argv[2])' "$1" "$2"; }
set_sps "$TMP/bench/vitddp-fp32-graph.h5" 100
cp "${FILES[2]}" "$TMP/bench/vitddp-fp32-np2-none-ce.h5"; set_sps "$TMP/bench/vitddp-fp32-np2-none-ce.h5" 40
for case in "50 80.0%" "400 40.0%"; do
  read -r g1 slower <<<"$case"
  cp "${FILES[3]}" "$TMP/bench/vitddp-fp32-graph-gpu1.h5"; set_sps "$TMP/bench/vitddp-fp32-graph-gpu1.h5" "$g1"
  want="| fp32 | none | copy-engine | 40.00 | 40.0% | $slower |"
  out=$("$VREPORT" speed "$TMP/bench" 2>"$TMP/err"); rc=$?
  if [ $rc -eq 0 ] && grep -qF "$want" <<<"$out" && grep -q "^| fp32 | vitddp, CUDA graph, on GPU 1 | $g1.00 |" <<<"$out"; then
    ok "speed_table: GPU 1 at $g1 steps/s: its row and the 2-GPU shares of GPU 0's and the slower GPU's figure"
  else bad "speed_table: GPU 1 at $g1: rc=$rc, want '$want' in: $(grep -E '^\| fp32 \| (none|vitddp, CUDA graph, on)' <<<"$out") $(cat "$TMP/err")"; fi
done
rm "$TMP/bench/vitddp-fp32-graph-gpu1.h5"
out=$("$VREPORT" speed "$TMP/bench" 2>"$TMP/err")
if grep -qF "| fp32 | none | copy-engine | 40.00 | 40.0% | n/a |" <<<"$out"; then
  ok "speed_table: no GPU-1 file: the slower GPU's share is n/a"
else bad "speed_table: no GPU-1 file: $(grep '^| fp32 | none | copy-engine' <<<"$out")"; fi
if [ "$("$PY" "$SPEED" "$TMP/bench" 2>&1)" = "$out" ]; then ok "results/speed_table.py = vitddp-report speed"
else bad "results/speed_table.py differs from vitddp-report speed"; fi

# ---- vitddp-report power: nvidia-smi samples written by hand. GPU 0: two busy samples (1980 and
# 1900 MHz, 600 and 700 W, the second power-capped), one idle (utilization 0) left out; GPU 1: one
# busy sample with HW slowdown; a torn last line. Then a file without the SM-clock column.
POWER=$(dirname "$PLOT")/power_table.py  # the old path, for the last case
cat >"$TMP/smi-run.csv" <<'CSV'
timestamp, index, utilization.gpu [%], clocks.current.sm [MHz], power.draw [W], temperature.gpu, clocks_event_reasons.active
2026/11/30 10:00:00.000, 0, 100, 1980, 600.00, 50, 0x0000000000000000
2026/11/30 10:00:00.050, 0, 99, 1900, 700.00, 55, 0x0000000000000004
2026/11/30 10:00:00.100, 0, 0, 345, 80.00, 40, 0x0000000000000001
2026/11/30 10:00:00.100, 1, 100, 990, 650.00, 61, 0x0000000000000008
2026/11/30 10:00:00.150, 0, 10
CSV
out=$("$VREPORT" power "$TMP/smi-run.csv" 2>"$TMP/err"); rc=$?
if [ $rc -eq 0 ] && grep -qF "| run | 0 | 2 | 1940 / 1900 | 650 | 55 | 50% | 0% |" <<<"$out" &&
   grep -qF "| run | 1 | 1 | 990 / 990 | 650 | 61 | 0% | 100% |" <<<"$out"; then
  ok "power_table: busy samples, mean/min clock, power, power-cap and slowdown shares"
else bad "power_table: rc=$rc: $out $(cat "$TMP/err")"; fi
# Cells without numbers and a torn last line without a newline (full field count, cut hex): the
# [N/A] SM clock row is skipped, the [N/A] reasons count as none, the torn line is dropped.
printf '%s\n' "timestamp, index, utilization.gpu [%], clocks.current.sm [MHz], power.draw [W], temperature.gpu, clocks_event_reasons.active" \
  "2026/11/30 10:00:00.000, 0, 100, [N/A], 600.00, 50, 0x0000000000000004" \
  "2026/11/30 10:00:00.050, 0, 100, 1800, [Not Supported], 51, [N/A]" >"$TMP/smi-na.csv"
printf '2026/11/30 10:00:00.100, 0, 100, 1000, 700.00, 52, 0x00000000000' >>"$TMP/smi-na.csv"
out=$("$VREPORT" power "$TMP/smi-na.csv" 2>"$TMP/err"); rc=$?
if [ $rc -eq 0 ] && grep -qF "| na | 0 | 1 | 1800 / 1800 | n/a | 51 | 0% | 0% |" <<<"$out"; then
  ok "power_table: [N/A] / [Not Supported] cells and a torn last line"
else bad "power_table: N/A cells: rc=$rc: $out $(cat "$TMP/err")"; fi
printf 'timestamp, index, power.draw [W]\n2026/11/30 10:00:00.000, 0, 600.00\n' >"$TMP/smi-bad.csv"
out=$("$PY" "$POWER" "$TMP/smi-bad.csv" 2>"$TMP/err"); rc=$?
if [ $rc -eq 2 ] && [ -z "$out" ] && grep -qF "smi-bad.csv: no 'index' or SM clock column" "$TMP/err"; then
  ok "power_table: a file without the SM clock column is named before any line, exit 2"
else bad "power_table: bad file: rc=$rc: $(cat "$TMP/err")"; fi

finish
