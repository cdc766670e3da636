# shellcheck shell=bash
# Shared by the experiment scripts of results/commands/ (source it; it reads the script's "$@").
#
# Every script is used as
#     bash results/commands/<topic>.sh [script arguments] OUT           run the experiment into OUT,
#                                                                      then write OUT/README.md
#     bash results/commands/<topic>.sh --readme DIR                     only (re)write DIR/README.md
#                                                                      from the files already there
# from the repository root. Environment:
#     VITDDP   the vitddp binary [build/vitddp]
#     PYTHON   a python3 with h5py and numpy [python3]
#     MPIRUN   the MPI launcher [mpirun]
# The number of GPUs is taken from `nvidia-smi -L`. As root, Open MPI's
# OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM) are set for the launcher; otherwise nothing is.
#
# The script defines, before sourcing: TOPIC (its name), TITLE, about() (prints what the folder
# measures, Markdown) and experiment() (the runs, into $OUT); optionally BASELINE (a regex: the
# 1-GPU files the share is taken against), NEED_GPUS (refused with fewer) and includes() (prints
# the paths of Markdown files to append to the README, after the runs table).
set -u -o pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
VITDDP=${VITDDP:-build/vitddp}
PY=${PYTHON:-python3}
MPIRUN=${MPIRUN:-mpirun}
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
export NCCL_NVLS_ENABLE=0  # NVLink SHARP is not usable on the H200 hosts measured here
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
MPI=("$MPIRUN" --bind-to none -x NCCL_NVLS_ENABLE=0)
WARMUP=${WARMUP:-10}
STEPS=${STEPS:-100}
status=0

die() { echo "$(basename "$0"): $*" >&2; exit 2; }

# common: the options every timed run shares (ViT-L/32 batch 32 by vitddp's defaults, data made
# on the GPU, WARMUP warm-up + STEPS timed steps, no cool-down).
common() { echo "--data device --warmup-steps $WARMUP --steps $STEPS --cooldown-steps 0 --progress-every 1000 --overwrite"; }

# vrun NAME RANKS PRECISION [vitddp options]: one run into $OUT/NAME.h5 (1 rank runs --no-ddp);
# prints its timed-window line (or its error) prefixed by NAME.
vrun() {
  local name=$1 n=$2 p=$3 ddp=""; shift 3
  [ "$n" = 1 ] && ddp=--no-ddp
  # shellcheck disable=SC2046
  timeout 600 "${MPI[@]}" -np "$n" "$VITDDP" $ddp --precision "$p" "$@" $(common) --out "$OUT/$name.h5" 2>&1 |
    grep -E "timed window|rror" | sed "s/^/$name: /"
  [ -s "$OUT/$name.h5" ] || status=1
}

# solo NAME GPU PRECISION [vitddp options]: a 1-GPU run (--no-ddp) on GPU number GPU alone.
solo() {
  local name=$1 gpu=$2 p=$3; shift 3
  # shellcheck disable=SC2046
  CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=$gpu timeout 600 "${MPI[@]}" -x CUDA_DEVICE_ORDER -x CUDA_VISIBLE_DEVICES \
    -np 1 "$VITDDP" --no-ddp --precision "$p" "$@" $(common) --out "$OUT/$name.h5" 2>&1 |
    grep -E "timed window|rror" | sed "s/^/$name: /"
  [ -s "$OUT/$name.h5" ] || status=1
}

# smi_start NAME / smi_stop: nvidia-smi samples of every GPU every 50 ms into $OUT/smi-NAME.csv
# (clocks, power, temperatures, active clock-event reasons: results/power_table.py reads them).
SMI_FIELDS=timestamp,index,utilization.gpu,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active
smi_start() {
  nvidia-smi --query-gpu=$SMI_FIELDS --format=csv,nounits -lms 50 > "$OUT/smi-$1.csv" 2>/dev/null &
  SMI_PID=$!
}
smi_stop() { kill "$SMI_PID" 2>/dev/null; wait "$SMI_PID" 2>/dev/null; }

# pack: the HDF5 files of $OUT into $OUT/h5.tar.xz (filters removed: xz packs them 2.4x smaller).
pack() {
  local t f; t=$(mktemp -d)
  for f in "$OUT"/*.h5; do
    [ -e "$f" ] || return 0
    h5repack -f NONE "$f" "$t/$(basename "$f")" 2>/dev/null || cp "$f" "$t/"
  done
  (cd "$t" && tar cf - ./*.h5 | xz -9e) > "$OUT/h5.tar.xz" && rm -f "$OUT"/*.h5
  rm -rf "$t"
}

# write_readme DIR: DIR/README.md from DIR's files (results/tools/topic_readme.py).
write_readme() {
  local dir=$1 about inc=()
  about=$(mktemp)
  about > "$about"
  if declare -F includes >/dev/null; then
    while read -r f; do [ -n "$f" ] && inc+=(--include "$f"); done < <(includes "$dir")
  fi
  "$PY" "$REPO/results/tools/topic_readme.py" "$dir" --title "$TITLE" --about "$about" \
    --command "bash results/commands/$TOPIC.sh ${USAGE_ARGS:-}OUT" --rewrite "bash results/commands/$TOPIC.sh --readme DIR" \
    --baseline "${BASELINE:-}" "${inc[@]}"
  local rc=$?
  rm -f "$about"
  [ $rc -eq 0 ] && echo "wrote $dir/README.md"
  return $rc
}

# main "$@": --readme DIR, or [script arguments] OUT (the script's own arguments are left in ARGS).
main() {
  if [ "${1:-}" = --readme ]; then
    [ $# -eq 2 ] || die "usage: $0 --readme DIR"
    [ -d "$2" ] || die "$2: no such folder"
    write_readme "$2"; exit $?
  fi
  [ $# -ge 1 ] || die "usage: $0 ${USAGE_ARGS:-}OUT  |  $0 --readme DIR"
  OUT=${!#}
  ARGS=("${@:1:$#-1}")
  [ -x "$VITDDP" ] || [ "${NEED_VITDDP:-1}" = 0 ] || die "VITDDP=$VITDDP: not an executable (build it: cmake --build build --target vitddp)"
  [ "$NGPU" -ge "${NEED_GPUS:-0}" ] || die "needs ${NEED_GPUS} GPU(s), nvidia-smi -L lists $NGPU"
  mkdir -p "$OUT" || die "$OUT: cannot create the folder"
  # (a group with a redirection, not a pipe: experiment() runs in this shell and can set status)
  { date -u; nvidia-smi -L 2>/dev/null; "$VITDDP" --version 2>/dev/null; experiment; date -u; } > >(tee "$OUT/log.txt") 2>&1
  write_readme "$OUT" || status=1
  exit $status
}
