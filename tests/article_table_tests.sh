#!/usr/bin/env bash
# The mechanics of results/commands/interconnects.sh (the article's table on 4 and
# 8 GPUs) without a GPU, as ctest article_table_cpu (label cli), in about 20 s on 2 cores:
#   - --plan for NP=4 and NP=8: every row listed with an estimate, the recommended invocations
#     (results/h200x2/interconnects/README.md) each within the 540 s budget, the 4-GPU set within 20 minutes;
#   - VITDDP_ARTICLE_CPU=1 (CPU backend, vit_micro, 2 ranks) for fp32 + bf16 with --slurm-train:
#     one .tar.gz in OUT and nothing else, every manifest line exit 0, an HDF5 file per vitddp row,
#     slurm/train.sbatch run through the srun stand-in;
#   - vitddp-report article on the tar: both precisions' tables, the targets, the plots
#     (scaling per precision, timeline: PNG signatures); a missing input exits 2 (also through the
#     old path results/article_table.py, which interconnects.sh calls);
#   - results/bench_torch_ddp.py: --help and the argument checks (exit 2), which need no torch.
# Usage: article_table_tests.sh <vitddp binary> <mpirun> <python3 with h5py, numpy, matplotlib>
set -u
BIN=$1
export MPIRUN=$2
PY=$3
REPO=$(cd "$(dirname "$0")/.." && pwd)
SH=$REPO/results/commands/interconnects.sh
source "$(dirname "$0")/test_util.sh" ""  # "": no mpirun line (interconnects.sh adds its own flags)
# vitddp-report (vitddp_tools): from $VITDDP_TOOLS_BIN (CTest: the build tree's venv, fixture
# vitddp_tools), else installed into a venv in the temporary folder.
if [ -z "${VITDDP_TOOLS_BIN:-}" ]; then
  bash "$(dirname "$0")/python/install_tools.sh" "$PY" "$REPO/results" "$TMP/venv" >/dev/null || { bad "install vitddp_tools"; finish; exit; }
  VITDDP_TOOLS_BIN=$TMP/venv/bin
fi
VREPORT=$VITDDP_TOOLS_BIN/vitddp-report
check() { if eval "$2"; then ok "$1"; else bad "$1"; return 1; fi; }

# ---- the plan
total=0
for spec in "4 nvlink --precisions fp32" "4 nvlink --precisions bf16" "4 shm --precisions fp32" "4 net --precisions fp32" \
            "8 nvlink --precisions fp32 --slurm-train" "8 nvlink --precisions bf16" "8 shm --precisions fp32" "8 net --precisions fp32"; do
  # shellcheck disable=SC2086
  plan=$(bash "$SH" $spec --plan 2>&1); rc=$?
  est=$(sed -n -E 's/^estimated total: ([0-9]+) s.*/\1/p' <<<"$plan")
  check "plan $spec: exit 0, total ${est:-?} s <= 540" '[ $rc -eq 0 ] && [ -n "$est" ] && [ "$est" -le 540 ]'
  check "plan $spec: no row past the budget" '! grep -q "past the budget" <<<"$plan"'
  case $spec in 4*) total=$((total + ${est:-9999})) ;; esac
done
check "plan: the four 4-GPU invocations together ${total} s <= 1200 s" '[ $total -le 1200 ]'
plan=$(bash "$SH" 8 nvlink --plan)
for key in noddp b25-np1 b25-np2 b25-np4 b25 b25-ce b2000-copy b2000 b2000-bf16 b2000-powersgd b25-bf16 b25-powersgd b100 b500 b1; do
  check "plan 8 nvlink: vitddp row $key" 'grep -qE "vitddp +$key " <<<"$plan"'
done
for key in noddp b25 b2000-copy b2000 b2000-bf16 b2000-powersgd; do
  check "plan 8 nvlink: torch row $key" 'grep -qE "torch +$key " <<<"$plan"'
done
check "plan 4 net: no scaling rows (b25-np2)" '! bash "$SH" 4 net --plan | grep -q b25-np2'
check "plan 4 shm: no copy-engine row (b25-ce)" '! bash "$SH" 4 shm --plan | grep -q b25-ce'
check "plan 4 shm --no-torch: no torch row" '! bash "$SH" 4 shm --no-torch --plan | grep -qE " torch "'
out=$(bash "$SH" 4 bogus --plan 2>&1); rc=$?
check "unknown transport: exit 2" '[ $rc -eq 2 ] && grep -q "unknown argument" <<<"$out"'
out=$(bash "$SH" nvlink --plan 2>&1); rc=$?
check "no NP: exit 2" '[ $rc -eq 2 ]'

# ---- CPU run: fp32 + bf16 + slurm/train.sbatch
mkdir -p "$TMP/out"
log=$(OUT=$TMP/out VITDDP_ARTICLE_CPU=1 VITDDP=$BIN PYTHON=$PY timeout 300 bash "$SH" 4 nvlink --precisions "fp32 bf16" --slurm-train 2>&1)
rc=$?
check "CPU run: exit 0" '[ $rc -eq 0 ]' || echo "$log" | tail -20
TAR=$TMP/out/article-np2-cpu-fp32-bf16.tar.gz
check "CPU run: one tar.gz in OUT and nothing else" '[ -s "$TAR" ] && [ "$(ls "$TMP/out" | wc -l)" -eq 1 ]'
mkdir -p "$TMP/x" && tar -C "$TMP/x" -xzf "$TAR" 2>/dev/null
M=$TMP/x/article-np2-cpu-fp32-bf16/manifest.tsv
check "tar: manifest, plan, env, log, table" '(for f in manifest.tsv plan.txt env.txt article_table.log table.md; do [ -s "$TMP/x/article-np2-cpu-fp32-bf16/$f" ] || exit 1; done)'
nrows=$(tail -n +2 "$M" 2>/dev/null | wc -l)
nok=$(tail -n +2 "$M" 2>/dev/null | awk -F'\t' '$6 == "0"' | wc -l)
check "manifest: $nrows rows (2 x 11 + slurm), all exit 0 ($nok)" '[ "$nrows" -eq 23 ] && [ "$nok" -eq "$nrows" ]'
nh5=$(ls "$TMP"/x/article-np2-cpu-fp32-bf16/runs/*.h5 2>/dev/null | wc -l)
check "runs: one HDF5 file per row ($nh5)" '[ "$nh5" -eq 23 ]'
check "slurm/train.sbatch ran through the srun stand-in (mpirun -np 2)" \
  'grep -q "^\[srun shim\] .*mpirun -np 2 .*build[^ ]*/vitddp --data-workers 8 --out results/runs/slurm-article-np2.h5" "$TMP/x/article-np2-cpu-fp32-bf16/runs/slurm-train.log"'

# ---- the table and the plots
mkdir -p "$TMP/p"
md=$("$VREPORT" article "$TAR" -o "$TMP/p/table.md" 2>"$TMP/err"); rc=$?
check "vitddp-report article on the tar: exit 0" '[ $rc -eq 0 ]' || cat "$TMP/err"
check "table: fp32 and bf16 sections" 'grep -q "^## fp32" <<<"$md" && grep -q "^## bf16" <<<"$md"'
check "table: the article's rows" '(for r in "no DDP (1 GPU)" "one 2000 MB bucket, bucket copy" "+ bf16 compression" "+ PowerSGD" "view, 25 MB buckets" "slurm/train.sbatch"; do grep -qF "$r" <<<"$md" || exit 1; done)'
check "table: detail columns" 'grep -q "| configuration | ranks | steps/s per GPU | share of our 1-GPU figure | exposed comm median (ms)" <<<"$md"'
check "table: target line and interconnect check" 'grep -q "2 ranks, 25 MB buckets: .*target >= 95%" <<<"$md" && grep -q "every run used the one asked for" <<<"$md"'
check "table written to -o" '[ -s "$TMP/p/table.md" ]'
check "plots: scaling per precision, timeline (PNG)" 'is_png "$TMP/p/scaling-cpu-fp32.png" && is_png "$TMP/p/scaling-cpu-bf16.png" && is_png "$TMP/p/timeline-np2-cpu-fp32-b25.png"'
# ---- a copy-engine row (b25-ce: NVLink only, so no CPU run makes one): the 2-rank 25 MB run copied
# as one, with the transport a copy-engine run records; then with the CPU run's transport instead.
X=$TMP/x/article-np2-cpu-fp32-bf16
ce_row() {  # ce_row TRANSPORT: (re)writes runs/cpu-fp32-b25-ce.h5 with that nccl_transport on both ranks
  "$PY" - "$X" "$1" <<'PY'
import os, shutil, sys
import h5py
d, transport = sys.argv[1], sys.argv[2]
shutil.copy(f"{d}/runs/cpu-fp32-b25.h5", f"{d}/runs/cpu-fp32-b25-ce.h5")
with h5py.File(f"{d}/runs/cpu-fp32-b25-ce.h5", "r+") as f:
    f.attrs["nccl_transport"] = [transport] * 2
with open(f"{d}/manifest.tsv") as m:
    rows = m.read()
if "\tb25-ce\t" not in rows:
    with open(f"{d}/manifest.tsv", "a") as m:
        m.write("cpu\tfp32\tvitddp\tb25-ce\t2\t0\t1\t2\truns/cpu-fp32-b25-ce.h5\n")
PY
}
ce_row "copy-engine (CUDA IPC peer-to-peer copies; NCCL: none)"
md=$("$VREPORT" article "$X" --no-plots 2>"$TMP/err"); rc=$?
check "copy-engine row: labelled, its transport passes the interconnect check" \
  '[ $rc -eq 0 ] && grep -qF "all-reduce by the copy engines" <<<"$md" && grep -q "every run used the one asked for" <<<"$md"' || cat "$TMP/err"
ce_row "none (CPU backend: MPI)"
md=$("$VREPORT" article "$X" --no-plots 2>"$TMP/err")
check "copy-engine row without the copy-engine transport: a mismatch" 'grep -q "MISMATCH in 1 run(s): cpu/fp32/b25-ce" <<<"$md"'

"$VREPORT" article "$TMP/nothing" --no-plots >/dev/null 2>&1; rc=$?
check "vitddp-report article: a missing input exits 2" '[ $rc -eq 2 ]'
"$PY" "$REPO/results/article_table.py" "$TMP/nothing" --no-plots >/dev/null 2>&1; rc=$?
check "results/article_table.py: a missing input exits 2" '[ $rc -eq 2 ]'

# ---- the PyTorch twin's command line (no torch needed)
"$PY" "$REPO/results/bench_torch_ddp.py" --help > "$TMP/help" 2>&1; rc=$?
check "bench_torch_ddp.py --help" '[ $rc -eq 0 ] && grep -q -- "--comm-hook" "$TMP/help"'
"$PY" "$REPO/results/bench_torch_ddp.py" --no-ddp --comm-hook bf16 >/dev/null 2>&1; rc=$?
check "bench_torch_ddp.py --no-ddp --comm-hook bf16: exit 2" '[ $rc -eq 2 ]'
"$PY" "$REPO/results/bench_torch_ddp.py" --comm-hook powersgd --powersgd-start-iter 1 >/dev/null 2>&1; rc=$?
check "bench_torch_ddp.py --powersgd-start-iter 1: exit 2" '[ $rc -eq 2 ]'
check "bench_torch_ddp.py --help lists the strategies and the compiler" \
  'grep -q -- "--strategy {ddp,zero1,fsdp}" "$TMP/help" && grep -q -- "--compile" "$TMP/help"'
"$PY" "$REPO/results/bench_torch_ddp.py" --no-ddp --strategy zero1 > "$TMP/cmdout" 2>&1; rc=$?
check "bench_torch_ddp.py --no-ddp --strategy zero1: exit 2 naming the option" '[ $rc -eq 2 ] && grep -q -- "--strategy zero1" "$TMP/cmdout"'
"$PY" "$REPO/results/bench_torch_ddp.py" --strategy fsdp --comm-hook bf16 > "$TMP/cmdout" 2>&1; rc=$?
check "bench_torch_ddp.py --strategy fsdp --comm-hook bf16: exit 2" '[ $rc -eq 2 ] && grep -q -- "DDP.s options" "$TMP/cmdout"'
"$PY" "$REPO/results/bench_torch_ddp.py" --fsdp-reshard-after-forward false > "$TMP/cmdout" 2>&1; rc=$?
check "bench_torch_ddp.py --fsdp-reshard-after-forward without fsdp: exit 2" '[ $rc -eq 2 ]'

finish
