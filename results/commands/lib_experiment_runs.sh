# Shared by the experiment jobs (ce_diagnostics.sh, device_session5_{a..f}.sh); source it after
# setting W (output folder, created here) and optionally PREFIX (file name prefix, default d) and
# BIN (the vitddp binary, default carry/vitddp_exp). Options given to exp_run come before $COMMON:
# a clash (--steps, --out...) is decided by $COMMON.
# vitddp ViT-L/32 batch 32, data on the GPU, 10 warm-up + 20 timed steps per run.
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
: "${W:?lib_experiment_runs.sh: set W to the output folder first}"
PREFIX=${PREFIX:-d}
BIN=${BIN:-carry/vitddp_exp}
mkdir -p "$W"
# The stripped binaries travel as carry/bins.tar.xz (the repository and them must stay under 64 MiB).
[ -f carry/bins.tar.xz ] && tar xJf carry/bins.tar.xz -C carry
COMMON="--data device --warmup-steps 10 --steps 20 --cooldown-steps 0 --progress-every 100 --overwrite"
CE="--allreduce copy-engine"

# exp_run NAME RANKS PRECISION [VAR=VALUE ...] [-- vitddp options]: one run into $W/$PREFIX-NAME.h5,
# the environment variables passed to every rank; 1 rank runs --no-ddp. Prints its timed-window line.
exp_run() {
  local name=$1 n=$2 p=$3; shift 3
  local envs=() xs=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); xs+=(-x "${1%%=*}"); shift; done
  [ $# -gt 0 ] && shift
  local ddp=""; [ "$n" = 1 ] && ddp="--no-ddp"
  env "${envs[@]}" timeout 90 mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 "${xs[@]}" -np "$n" "$BIN" $ddp \
    --precision "$p" "$@" $COMMON --out "$W/$PREFIX-$name.h5" 2>&1 | grep -E "timed window|rror" | sed "s/^/$name: /"
}

# exp_mpi_tests VAR VALUE...: carry/gpu_mpi_tests_exp "[reducer],[ce_allreduce]" on 2 ranks once per
# value of the environment variable VAR ("" for unset), each result line counted.
exp_mpi_tests() {
  local var=$1 v; shift
  for v in "$@"; do
    echo "== gpu_mpi_tests [reducer],[ce_allreduce] with $var='$v'"
    env "$var=$v" timeout 120 mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -x "$var" \
      -np 2 carry/gpu_mpi_tests_exp "[reducer],[ce_allreduce]" 2>&1 | grep -E "passed|failed|FAILED|equivalence" | sort | uniq -c
  done
}

# exp_tables PRECISION...: per precision and repeat (r1, r2), the overlap table of every 2-rank run
# against that repeat's 1-rank run ($PREFIX-<precision>-np1-r<k>.h5).
exp_tables() {
  local p rep
  for p in "$@"; do
    for rep in 1 2; do
      [ -f "$W/$PREFIX-$p-np1-r$rep.h5" ] || continue
      echo; echo "## $p, repeat $rep"
      python3 results/overlap_table.py --baseline "$W/$PREFIX-$p-np1-r$rep.h5" \
        $(ls "$W"/$PREFIX-$p-*-r$rep.h5 2>/dev/null | grep -v np1)
    done
  done
}
