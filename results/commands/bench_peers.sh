#!/usr/bin/env bash
# vitddp against its peers on one GPU, in one job: vitddp (--no-ddp --data device), PyTorch
# (results/peers/torch_peers.py: eager, whole-step CUDA graph, torch.compile reduce-overhead and
# max-autotune) and JAX (results/peers/jax_vit.py), all training the same torchvision ViT step
# (fixed random batch on the GPU, mean cross-entropy, SGD lr 1e-3 on fp32 weights).
#   For each model and batch: the GEMM ceilings at the model's linear shapes
#     (torch_peers.py --gemm-ceilings, the precisions of PRECISIONS), then ROUNDS rounds, each
#     running every (model, batch, precision) with vitddp and every mode in turn (round-robin,
#     so clock or thermal drift spreads over all tools); every run under `timeout`, nvidia-smi
#     sampling the GPU's memory.used meanwhile.
#   Then results/peers/peers_table.py writes OUT/peers_table.md.
# Run from anywhere on the GPU machine:
#     bash results/commands/bench_peers.sh OUT
# Environment (defaults in brackets):
#   VITDDP [build/vitddp]  PYTHON [python3]  MODELS [vit_l_32]  BATCHES [32]  PRECISIONS [bf16]
#   MODES [eager cudagraph compile-reduce-overhead compile-max-autotune jax]; also jax-xla (JAX
#     with XLA's attention instead of cuDNN's), jax-tf32x3 (fp32 only: JAX with the
#     TF32_TF32_F32_X3 dot algorithm, the peer of vitddp's --fp32-matmul tf32x3) and none (vitddp alone)
#   ROUNDS [2]  WARMUP [10]  STEPS [100]  SKIP_VITDDP [0]  GEMM [1: probe the ceilings]
#   TIMEOUT_S [300] per run, TIMEOUT_AUTOTUNE_S [600] for compile-max-autotune (it compiles for
#     minutes)  GPU [0]: the index nvidia-smi samples  VITDDP_ARGS: more vitddp options
#   OPTIMIZER_STEP [eager]: the compile modes' SGD step, eager or compiled (torch_peers.py)
#   DEVICE [cuda]: cpu passes --device cpu to the peers and skips the GEMM probe, and
#     VITDDP_DATA [device] is vitddp's --data: a dry run on a machine without a GPU is
#     DEVICE=cpu VITDDP_DATA=synthetic VITDDP_ARGS="--backend cpu" MODELS=vit_tiny BATCHES=4
#     MODES="eager jax" STEPS=5 WARMUP=2
#   JAX_PREALLOCATE [false]: XLA_PYTHON_CLIENT_PREALLOCATE for the JAX runs (false: XLA grows its
#     pool as needed, so nvidia-smi's peak means the same as for the other tools)
# Writes OUT/bench_peers.log, OUT/runs.tsv (one line a run: round, tool, mode, model, batch,
# precision, exit status, seconds, file), the runs' HDF5/JSON files, mem-*.txt and peers_table.md.
# Exit 0 when every run succeeded, 1 when one failed (the table still lists the others), 2 on bad
# settings (before any run), 124 when stopped by SIGTERM or SIGINT (the table then holds the runs
# that finished).
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OUT=${1:-}
[ -n "$OUT" ] || { echo "bench_peers.sh: usage: bench_peers.sh OUT (the folder for the results)" >&2; exit 2; }
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PEERS=$ROOT/results/peers
VITDDP=${VITDDP:-build/vitddp}
PY=${PYTHON:-python3}
MODELS=${MODELS:-vit_l_32}
BATCHES=${BATCHES:-32}
PRECISIONS=${PRECISIONS:-bf16}
MODES=${MODES:-eager cudagraph compile-reduce-overhead compile-max-autotune jax}
ROUNDS=${ROUNDS:-2}
WARMUP=${WARMUP:-10}
STEPS=${STEPS:-100}
SKIP_VITDDP=${SKIP_VITDDP:-0}
GEMM=${GEMM:-1}
TIMEOUT_S=${TIMEOUT_S:-300}
TIMEOUT_AUTOTUNE_S=${TIMEOUT_AUTOTUNE_S:-600}
GPU=${GPU:-0}
VITDDP_ARGS=${VITDDP_ARGS:-}
OPTIMIZER_STEP=${OPTIMIZER_STEP:-eager}
JAX_PREALLOCATE=${JAX_PREALLOCATE:-false}
DEVICE=${DEVICE:-cuda}
VITDDP_DATA=${VITDDP_DATA:-device}

bad() { echo "bench_peers.sh: $1" >&2; exit 2; }
is_count() { [[ $1 =~ ^[1-9][0-9]*$ ]]; }
for m in $MODELS; do
  case $m in vit_b_32|vit_b_16|vit_l_32|vit_l_16|vit_h_14|tiny|vit_tiny) ;; *) bad "MODELS: unknown model '$m' (vit_b_32 vit_b_16 vit_l_32 vit_l_16 vit_h_14 tiny vit_tiny)";; esac
done
for b in $BATCHES; do is_count "$b" || bad "BATCHES: '$b' is not a positive integer"; done
for p in $PRECISIONS; do case $p in bf16|tf32|fp32) ;; *) bad "PRECISIONS: unknown precision '$p' (bf16 tf32 fp32)";; esac; done
for mode in $MODES; do
  case $mode in eager|cudagraph|compile-reduce-overhead|compile-max-autotune|jax|jax-xla|jax-tf32x3|none) ;;
    *) bad "MODES: unknown mode '$mode' (eager cudagraph compile-reduce-overhead compile-max-autotune jax jax-xla jax-tf32x3 none)";; esac
done
for v in ROUNDS STEPS TIMEOUT_S TIMEOUT_AUTOTUNE_S; do is_count "${!v}" || bad "$v: '${!v}' is not a positive integer"; done
[[ $WARMUP =~ ^[0-9]+$ ]] && [ "$WARMUP" -ge 2 ] || bad "WARMUP: '$WARMUP' must be an integer >= 2 (the CUDA-graph peer warms up before capturing)"
case $DEVICE in cuda|cpu) ;; *) bad "DEVICE: '$DEVICE' is not cuda or cpu";; esac
[ "$DEVICE" = cpu ] && GEMM=0
case $OPTIMIZER_STEP in eager|compiled) ;; *) bad "OPTIMIZER_STEP: '$OPTIMIZER_STEP' is not eager or compiled";; esac
if [ "$SKIP_VITDDP" != 1 ]; then
  [ -x "$VITDDP" ] || bad "VITDDP: '$VITDDP' is not an executable (build vitddp or set VITDDP=PATH; SKIP_VITDDP=1 runs the peers alone)"
fi
TORCH_MODES=$(for mode in $MODES; do case $mode in eager|cudagraph|compile-*) echo "$mode";; esac; done)
JAX_MODES=$(for mode in $MODES; do case $mode in jax|jax-xla|jax-tf32x3) echo "$mode";; esac; done)
if [ -n "$TORCH_MODES" ] || [ "$GEMM" = 1 ]; then  # the PyTorch peers and the GEMM probe
  "$PY" -c 'import torch, torchvision, h5py' 2>/dev/null || bad "PYTHON: '$PY' cannot import torch, torchvision and h5py"
else
  "$PY" -c 'import h5py' 2>/dev/null || bad "PYTHON: '$PY' cannot import h5py"
fi
[ -z "$JAX_MODES" ] || "$PY" -c 'import jax' 2>/dev/null || bad "PYTHON: '$PY' cannot import jax (MODES has $JAX_MODES)"
MPIRUN=()
command -v mpirun >/dev/null && MPIRUN=(mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -np 1)
mkdir -p "$OUT" || bad "OUT: cannot create '$OUT'"
OUT=$(cd "$OUT" && pwd)
LOG=$OUT/bench_peers.log
[ -e "$OUT/runs.tsv" ] || printf 'round\ttool\tmode\tmodel\tbatch\tprecision\trc\tseconds\tfile\n' > "$OUT/runs.tsv"
status=0
CHILD=0 SMI=0  # the running tool and its nvidia-smi sampler (0: none)

# On SIGTERM/SIGINT (a job's time limit, Slurm's --signal, Ctrl-C): stop the running tool, write
# the table of the runs that finished, exit 124 (as timeout does), so a cut job keeps its results.
on_stop() {
  trap - TERM INT
  [ "$CHILD" -gt 0 ] && { kill -TERM "$CHILD" 2>/dev/null; wait "$CHILD" 2>/dev/null; }
  [ "$SMI" -gt 0 ] && { kill "$SMI" 2>/dev/null; wait "$SMI" 2>/dev/null; }
  # (stdout is the log here: the trap runs inside the main block, whose output goes to $LOG)
  echo "== stopped by a signal: peers_table.md holds the runs that finished"
  "$PY" "$PEERS/peers_table.py" "$OUT" > "$OUT/peers_table.md"
  cat "$OUT/peers_table.md" 2>/dev/null
  exit 124
}
trap on_stop TERM INT

# run_one ROUND TOOL MODE MODEL BATCH PRECISION FILE COMMAND...: runs COMMAND under timeout with
# nvidia-smi sampling memory.used into mem-<FILE's name without extension>.txt; appends to runs.tsv.
run_one() {
  local round=$1 tool=$2 mode=$3 model=$4 batch=$5 prec=$6 file=$7
  shift 7
  local stem limit=$TIMEOUT_S t0 rc
  stem=$(basename "${file%.*}")
  [ "$mode" = compile-max-autotune ] && limit=$TIMEOUT_AUTOTUNE_S
  echo "== round $round: $tool $mode $model batch $batch $prec (timeout $limit s): $*"
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i "$GPU" -lms 100 > "$OUT/mem-$stem.txt" 2>/dev/null &
  SMI=$!
  t0=$(date +%s.%N)
  # In the background and waited for, so that a signal reaches on_stop at once.
  timeout -k 10 "$limit" "$@" &
  CHILD=$!
  wait "$CHILD"
  rc=$?
  CHILD=0
  kill "$SMI" 2>/dev/null; wait "$SMI" 2>/dev/null
  SMI=0
  local dt
  dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$tool" "$mode" "$model" "$batch" "$prec" "$rc" "$dt" \
    "$(basename "$file")" >> "$OUT/runs.tsv"
  if [ "$rc" -ne 0 ]; then
    echo "== FAILED (exit $rc$([ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && echo ", timed out after $limit s")): $tool $mode $model batch $batch $prec round $round"
    status=1
  else
    echo "== done in $dt s"
  fi
}

{
  date -u; nvidia-smi -L
  [ -z "$TORCH_MODES" ] && [ "$GEMM" != 1 ] ||
    "$PY" -c 'import sys, torch, torchvision; print("python", sys.version.split()[0], "torch", torch.__version__, "torchvision", torchvision.__version__)'
  [ -z "$JAX_MODES" ] || "$PY" -c 'import jax, jaxlib; print("jax", jax.__version__, "jaxlib", jaxlib.__version__, jax.devices())'
  echo "MODELS=$MODELS BATCHES=$BATCHES PRECISIONS=$PRECISIONS MODES=$MODES ROUNDS=$ROUNDS WARMUP=$WARMUP STEPS=$STEPS"
  if [ "$GEMM" = 1 ]; then
    for m in $MODELS; do
      for b in $BATCHES; do
        run_one 0 gemm ceilings "$m" "$b" all "$OUT/gemm-$m-b$b.json" \
          "$PY" "$PEERS/torch_peers.py" --gemm-ceilings --model "$m" --batch-size "$b" \
          --gemm-precisions "$(echo $PRECISIONS | tr ' ' ',')" --json "$OUT/gemm-$m-b$b.json"
      done
    done
  fi
  for r in $(seq 1 "$ROUNDS"); do
    for m in $MODELS; do
      for b in $BATCHES; do
        for p in $PRECISIONS; do
          tag="$m-b$b-$p-r$r"
          if [ "$SKIP_VITDDP" != 1 ]; then
            # shellcheck disable=SC2086 - VITDDP_ARGS is a list of options
            run_one "$r" vitddp default "$m" "$b" "$p" "$OUT/vitddp-$tag.h5" \
              "${MPIRUN[@]}" "$VITDDP" --no-ddp --model "$m" --precision "$p" --batch-size "$b" --data "$VITDDP_DATA" \
              --warmup-steps "$WARMUP" --steps "$STEPS" --cooldown-steps 0 --progress-every 1000 --overwrite \
              --out "$OUT/vitddp-$tag.h5" $VITDDP_ARGS
          fi
          for mode in $TORCH_MODES; do
            run_one "$r" torch "$mode" "$m" "$b" "$p" "$OUT/torch-$mode-$tag.json" \
              "$PY" "$PEERS/torch_peers.py" --model "$m" --batch-size "$b" --precision "$p" --mode "$mode" --device "$DEVICE" \
              --optimizer-step "$OPTIMIZER_STEP" --warmup-steps "$WARMUP" --steps "$STEPS" --json "$OUT/torch-$mode-$tag.json"
          done
          for mode in $JAX_MODES; do
            attn=auto; [ "$mode" = jax-xla ] && attn=xla
            mm=ieee; [ "$mode" = jax-tf32x3 ] && mm=tf32x3
            [ "$mm" = tf32x3 ] && [ "$p" != fp32 ] && continue  # an fp32-only algorithm
            run_one "$r" jax "$mode" "$m" "$b" "$p" "$OUT/$mode-$tag.json" \
              env XLA_PYTHON_CLIENT_PREALLOCATE="$JAX_PREALLOCATE" "$PY" "$PEERS/jax_vit.py" --model "$m" \
              --batch-size "$b" --precision "$p" --attention "$attn" --fp32-matmul "$mm" --device "$DEVICE" \
              --warmup-steps "$WARMUP" --steps "$STEPS" --json "$OUT/$mode-$tag.json"
          done
        done
      done
    done
  done
  "$PY" "$PEERS/peers_table.py" "$OUT" > "$OUT/peers_table.md" || { echo "== FAILED: peers_table.py"; status=1; }
  cat "$OUT/peers_table.md"
  date -u
} > "$LOG" 2>&1
echo "exit $status"
grep -E 'FAILED|timed window|^== done' "$LOG" | tail -n 60
cat "$OUT/peers_table.md" 2>/dev/null
exit $status
