#!/usr/bin/env bash
# Rewrites this folder: the validation against every 2-GPU run of ../interconnects, ../speed,
# ../copy-engine/* and ../power/* (NCCL and copy-engine), the link tables fitted per transport, and the
# 4- and 8-GPU predictions (predictions.md).
# Usage: bash results/h200x2/predictor/make.sh   (from the repository root; vitddp-report on PATH,
# or VITDDP_REPORT="python3 -m vitddp_tools.report" with PYTHONPATH=results; PYTHON: a python3 with h5py)
set -euo pipefail
R=${VITDDP_REPORT:-vitddp-report}
OUT=results/h200x2/predictor
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
# each folder its own --validate argument (its own reference, link table and baseline); power/parts is left
# out: its skip-* runs drop parts of the all-reduce by a switch the files do not record (README)
RUNS="results/h200x2/interconnects results/h200x2/speed"
for a in results/h200x2/copy-engine/*/h5.tar.xz results/h200x2/power/*/h5.tar.xz; do
  d=$(dirname "$a")
  [ "$d" = results/h200x2/power/parts ] || RUNS="$RUNS $d"
done
$R predict --validate $RUNS --leave-one-out --comm-streams-table $OUT/comm-streams.csv \
  -o $OUT/validation-leave-one-out.md --plot $OUT/validation-leave-one-out.png >/dev/null
$R predict --validate $RUNS --comm-streams-table $OUT/comm-streams.csv -o $OUT/validation.md --plot $OUT/validation.png >/dev/null
tar xJf results/h200x2/interconnects/h5.tar.xz -C "$T" --wildcards '*.h5'
for tr in nvlink shm net; do
  $R predict --fit-link "$T"/$tr/*.h5 --write-link-table $OUT/link-$tr.csv
done
{
  echo "| GPUs | transport | buckets MiB | compression | mode | step ms | exposed ms | steps/s per GPU | share of 1 GPU | dominant |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
  for n in 2 4 8; do for tr in nvlink shm; do
    for cfg in "25 none ddp" "25 bf16 ddp" "2000 none ddp" "25 none zero1"; do
      set -- $cfg
      $R predict "$T"/$tr/b25.h5 --baseline "$T"/nvlink/noddp.h5 --link-table $OUT/link-$tr.csv \
        --ranks $n --bucket-cap-mb $1 --compression $2 --mode $3 --json >"$T/p.json"
      ${PYTHON:-python3} - "$T/p.json" "$T"/nvlink/noddp.h5 <<'PY'
import json, sys, h5py
p = json.load(open(sys.argv[1])); s = p["scenario"]
one = float(h5py.File(sys.argv[2], "r")["summary/steps_per_second"][()])
print("| %d | %s | %g | %s | %s | %.2f | %.2f | %.2f | %.1f%% | %s |" % (
    s["ranks"], s["transport"], s["cap_mb"], s["compression"], "DDP" if s["mode"] == "ddp" else "ZeRO-1",
    1e3 * p["step_time_s"], 1e3 * (p["exposed_comm_s"] + p["allgather_s"]), p["steps_per_second_per_gpu"],
    100 * p["steps_per_second_per_gpu"] / one, p["dominant"]))
PY
    done
  done; done
  echo
  echo "bf16 (reference speed/vitddp-bf16-np2-none, 1-GPU baseline speed/vitddp-bf16-graph; ZeRO-1 with the fp32 and the bf16 parameter all-gather):"
  echo
  echo "| GPUs | transport | buckets MiB | compression | mode | all-gather | step ms | exposed ms | steps/s per GPU | share of 1 GPU | dominant |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
  tar xJf results/h200x2/speed/h5.tar.xz -C "$T" vitddp-bf16-np2-none.h5 vitddp-bf16-graph.h5
  for n in 2 4 8; do for tr in nvlink shm; do
    for cfg in "none ddp fp32" "bf16 ddp fp32" "none zero1 fp32" "none zero1 bf16"; do
      set -- $cfg
      ag=(); [ "$2" = zero1 ] && ag=(--allgather-dtype "$3")  # DDP runs no all-gather: predict refuses the option there
      $R predict "$T"/vitddp-bf16-np2-none.h5 --baseline "$T"/vitddp-bf16-graph.h5 --link-table $OUT/link-$tr.csv \
        --transport $tr --ranks $n --bucket-cap-mb 25 --compression $1 --mode $2 "${ag[@]}" --json >"$T/p.json"
      ${PYTHON:-python3} - "$T/p.json" "$T"/vitddp-bf16-graph.h5 <<'PY'
import json, sys, h5py
p = json.load(open(sys.argv[1])); s = p["scenario"]
one = float(h5py.File(sys.argv[2], "r")["summary/steps_per_second"][()])
zero = s["mode"] == "zero1"
print("| %d | %s | %g | %s | %s | %s | %.2f | %.2f | %.2f | %.1f%% | %s |" % (
    s["ranks"], s["transport"], s["cap_mb"], s["compression"], "ZeRO-1" if zero else "DDP",
    s["gathered_dtype"] if zero else "-", 1e3 * p["step_time_s"], 1e3 * (p["exposed_comm_s"] + p["allgather_s"]),
    p["steps_per_second_per_gpu"], 100 * p["steps_per_second_per_gpu"] / one, p["dominant"]))
PY
    done
  done; done
} >$OUT/predictions.md
$R predict "$T"/nvlink/b25.h5 --baseline "$T"/nvlink/noddp.h5 --link-table $OUT/link-nvlink.csv --ranks 8 \
  | sed "s|$T/|interconnects/h5.tar.xz:|g" >$OUT/example-8-nvlink.md
