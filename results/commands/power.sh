#!/usr/bin/env bash
# Is the 2-GPU loss the all-reduce or the two GPUs sharing a budget? Per round (ROUNDS, 2) and
# precision (PRECISIONS, "bf16 tf32"; tf32 in the first round only), 300 timed steps each:
#   solo0 / solo1  one GPU alone (--no-ddp) on GPU 0 / GPU 1, the other idle;
#   both0 / both1  the same two runs at the same time (no communication between them);
#   ddp            2 ranks, DDP, copy-engine all-reduce (--comm-streams auto).
# nvidia-smi samples every GPU every 50 ms (SM clock, power, temperature, clock-event reasons).
# Usage: bash results/commands/power.sh OUT   |   bash results/commands/power.sh --readme DIR
# Writes into OUT: <precision>-<run>-r<round>.h5 (packed into h5.tar.xz), smi-<...>.csv (packed
# into smi.tar.xz), power_table.md (results/power_table.py), log.txt, README.md. About 4 minutes.
TOPIC=power
TITLE="Power and clocks on 2 GPUs: alone, together, in DDP, and the all-reduce's parts"
NEED_GPUS=2
BASELINE='solo0|1gpu|np1'
STEPS=${STEPS:-300}
about() {
  cat <<'MD'
ViT-L/32, batch 32 per GPU, data on the GPU, 300 timed steps per run, with nvidia-smi sampling both
GPUs every 50 ms (`smi-*.csv`: SM clock, power, temperature, active clock-event reasons; the power
limit is 700 W, the highest SM clock 1980 MHz). Each GPU alone, both at once as two independent
1-GPU runs, and DDP with the copy-engine all-reduce. The power table gives, per run and GPU, the
busy samples' mean SM clock and power and the share of samples held at the power limit
(SW Power Cap, clock-event reason 0x4).
MD
}
includes() {  # one power table per folder holding nvidia-smi samples
  local d=$1 sub t out
  out=$(mktemp --suffix .md)
  echo "## Clocks and power while each run was busy (results/power_table.py)" > "$out"
  while read -r sub; do
    t=$(mktemp -d)
    [ -f "$sub/smi.tar.xz" ] && tar xJf "$sub/smi.tar.xz" -C "$t"
    cp "$sub"/smi-*.csv "$t"/ 2>/dev/null
    for f in "$sub"/smi-*.csv.gz; do [ -f "$f" ] && gunzip -c "$f" > "$t/$(basename "${f%.gz}")"; done
    if ls "$t"/smi-*.csv >/dev/null 2>&1; then
      { echo; echo "### $(realpath --relative-to="$d" "$sub")/"; echo
        # shellcheck disable=SC2046
        "$PY" "$REPO/results/power_table.py" $(find "$t" -name 'smi-*.csv' | sort); } >> "$out"
    fi
    rm -rf "$t"
  done < <(find "$d" -type d | sort)
  echo "$out"
}
experiment() {
  local r p b
  for ((r = 1; r <= ${ROUNDS:-2}; ++r)); do
    for p in ${PRECISIONS:-bf16 tf32}; do
      [ $r -gt 1 ] && [ "$p" = tf32 ] && continue
      smi_start "$p-solo0-r$r"; solo "$p-solo0-r$r" 0 "$p"; smi_stop
      smi_start "$p-solo1-r$r"; solo "$p-solo1-r$r" 1 "$p"; smi_stop
      smi_start "$p-both-r$r"; solo "$p-both0-r$r" 0 "$p" & b=$!; solo "$p-both1-r$r" 1 "$p"; wait $b; smi_stop
      smi_start "$p-ddp-r$r"; vrun "$p-ddp-r$r" 2 "$p" --allreduce copy-engine; smi_stop
    done
  done
  "$PY" "$REPO/results/power_table.py" "$OUT"/smi-*.csv | tee "$OUT/power_table.md"
  pack
  (cd "$OUT" && tar cf - smi-*.csv | xz -9e > smi.tar.xz && rm -f smi-*.csv)
}
source "$(dirname "$0")/lib.sh"
main "$@"
