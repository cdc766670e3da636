#!/usr/bin/env bash
# Two vitddp builds side by side on one GPU: BASE (an earlier build) and VITDDP (this one), batch
# BATCH, --no-ddp, data on the GPU, each model of MODELS in each precision of PRECISIONS, alternating run by
# run for ROUNDS rounds, and a table of the median steps/s of each and their ratio (a change that
# should not move the speed must stay within 1%).
# Usage: BASE=old/vitddp bash results/commands/speed-regression.sh OUT
#        bash results/commands/speed-regression.sh --readme DIR
#   ROUNDS [3], BATCH [32], STEPS [100; fp32 runs 40], WARMUP [10], MODELS [vit_l_32], PRECISIONS
#   [fp32 tf32 bf16], VITDDP_ARGS (more options for both builds), BASE_ARGS / NEW_ARGS (for one
#   of them: BASE=$VITDDP with two option sets compares the options). BATCH, STEPS, BASE_ARGS and
#   NEW_ARGS also name them in the README (--readme: set them as for the runs). Writes
#   OUT/[<model>-]<p>-{base,new}-r<r>.h5 (no model prefix for vit_l_32), log.txt,
#   regression_table.md, README.md. About 2 minutes on an H200 with the defaults.
TOPIC=speed-regression
BATCH=${BATCH:-32}
TITLE="Speed of two vitddp builds on one GPU, alternating (batch $BATCH)"
NEED_GPUS=1
ROUNDS=${ROUNDS:-3}
about() {
  cat <<MD
One GPU, batch $BATCH, \`--no-ddp\`, SGD, data on the GPU (\`--data device\`), ${WARMUP:-10} warm-up and
${STEPS:-100} timed steps (fp32: 40), CUDA graph on; ViT-L/32 unless a file name starts with another model.
Each round runs the earlier build (\`base\`) and this build (\`new\`) back to back for every model
and precision, so both see the same clocks and temperature. \`regression_table.md\` gives the
median over the rounds of each build and the ratio new / base.
MD
  if [ -n "${BASE_ARGS:-}${NEW_ARGS:-}" ]; then
    echo
    echo "Options of one side only: base \`${BASE_ARGS:-(none)}\`, new \`${NEW_ARGS:-(none)}\` (with BASE the"
    echo "same binary as VITDDP, the two sides differ in these options alone)."
  fi
}
regression_table() {  # regression_table DIR: DIR/regression_table.md from DIR's HDF5 files
  "$PY" - "$1" <<'PY'
import glob, io, os, re, statistics, sys, tarfile
import h5py
d = sys.argv[1]
runs = {}
def add(name, opener):
    m = re.match(r"(?:(vit_\w+?)-)?(fp32|tf32|bf16)-(base|new)-r(\d+)\.h5$", os.path.basename(name))
    if m:
        with h5py.File(opener(), "r") as h:
            key = (m.group(1) or "vit_l_32", m.group(2), m.group(3))
            runs.setdefault(key, []).append(float(h["summary/steps_per_second"][()]))
for f in glob.glob(os.path.join(d, "*.h5")):
    add(f, lambda f=f: f)
if os.path.exists(os.path.join(d, "h5.tar.xz")):  # the packed files of a kept folder
    with tarfile.open(os.path.join(d, "h5.tar.xz")) as t:
        for m in t.getmembers():
            if m.isfile():
                add(m.name, lambda m=m: io.BytesIO(t.extractfile(m).read()))
lines = ["| model | precision | base steps/s (median) | new steps/s (median) | new / base | rounds base | rounds new |",
         "| --- | --- | ---: | ---: | ---: | --- | --- |"]
for model in sorted({k[0] for k in runs}):
    for p in ("fp32", "tf32", "bf16"):
        b, n = runs.get((model, p, "base"), []), runs.get((model, p, "new"), [])
        if not b or not n:
            continue
        mb, mn = statistics.median(b), statistics.median(n)
        lines.append(f"| {model} | {p} | {mb:.2f} | {mn:.2f} | {mn / mb:.4f} | "
                     f"{' / '.join(f'{x:.2f}' for x in sorted(b))} | {' / '.join(f'{x:.2f}' for x in sorted(n))} |")
open(os.path.join(d, "regression_table.md"), "w").write("## Base against new\n\n" + "\n".join(lines) + "\n")
PY
}
includes() { regression_table "$1" && echo "$1/regression_table.md"; }
experiment() {
  [ -x "${BASE:-}" ] || die "BASE=${BASE:-}: set BASE to the earlier vitddp binary"
  local r m p bin args who n name
  for ((r = 1; r <= ROUNDS; ++r)); do
    for m in ${MODELS:-vit_l_32}; do
      for p in ${PRECISIONS:-fp32 tf32 bf16}; do
        for who in base new; do
          bin=$VITDDP args=${NEW_ARGS:-}
          [ $who = base ] && bin=$BASE args=${BASE_ARGS:-}
          n=$STEPS; [ $p = fp32 ] && n=40
          name=$m-$p-$who-r$r; [ "$m" = vit_l_32 ] && name=$p-$who-r$r
          # shellcheck disable=SC2086
          timeout 600 "${MPI[@]}" -np 1 "$bin" --no-ddp --model "$m" --batch-size "$BATCH" --precision $p --data device \
            --warmup-steps "$WARMUP" --steps $n --cooldown-steps 0 ${VITDDP_ARGS:-} $args --out "$OUT/$name.h5" 2>&1 |
            grep -E "timed window|rror" | sed "s/^/$name: /"
          [ -s "$OUT/$name.h5" ] || status=1
        done
      done
    done
  done
  pack
}
source "$(dirname "$0")/lib.sh"
main "$@"
