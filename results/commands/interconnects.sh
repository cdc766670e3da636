#!/usr/bin/env bash
# The article's table (PyTorch DDP on ViT-L/32, "Optimizing data transfer in distributed AI/ML
# training workloads") on NP GPUs of one machine, per interconnect and precision, vitddp next to its
# PyTorch twin (results/bench_torch_ddp.py) in the same job: no DDP, one 2000 MB bucket with bucket
# copies (PyTorch's defaults), + gradient_as_bucket_view, + bf16 compression, + PowerSGD, and bucket
# sizes 1-500 MB, over NVLink, through host memory (SHM) and over sockets (NET).
#
# Usage (from the repository root):
#   bash results/commands/interconnects.sh NP TRANSPORT... [options]    run, into --out DIR (or $OUT)
#   bash results/commands/interconnects.sh --readme DIR                 (re)write DIR/README.md
#     NP          ranks = GPUs: 2, 4 or 8
#     TRANSPORT   nvlink (NCCL's default: P2P over NVLink), shm (-x NCCL_P2P_DISABLE=1: through
#                 host memory, the article's PCIe machine), net (+ -x NCCL_SHM_DISABLE=1: sockets)
#   --out DIR     the folder for the tar [$OUT]
#   --precisions "fp32 bf16"   vitddp --precision / PyTorch autocast, one part per transport and
#                 precision [fp32]
#   --no-torch    leave out the PyTorch rows (results/bench_torch_ddp.py)
#   --slurm-train also run slurm/train.sbatch as it is, with mpirun standing in for srun (an srun
#                 shim on PATH, SLURM_SUBMIT_DIR/JOB_ID/CPUS_PER_TASK/NTASKS set); with no
#                 TRANSPORT only that
#   --plan        print the plan with estimated times and exit (needs neither GPU nor --out)
#   --budget S    skip the rows that would end after S seconds of this invocation [540]; the tar
#                 is always written
# Environment: VITDDP (build/vitddp), PYTHON (python3), MPIRUN (mpirun), WARMUP/STEPS (10/20; net 3/5),
#   VITDDP_ARTICLE_CPU=1: test mode for a machine without GPU: --backend cpu --model vit_micro
#   --data synthetic, 1 warm-up + 2 timed steps, NP=2, mpirun --oversubscribe, no PyTorch rows,
#   no NCCL transport (one part per precision named "cpu"; --precision is not passed, the CPU
#   backend being fp32 only). ctest article_table_cpu runs it. With VITDDP_ARTICLE_CPU_TORCH=1 too
#   (needs torch + torchvision on the CPU, e.g. Debian's python3-torch): the PyTorch rows with
#   bench_torch_ddp.py --device cpu (gloo, vit_b_32 at 64x64, batch 2; ~30 s a row; the bf16 hook
#   fails there: torch's bf16_compress_hook wants NCCL).
#   As root, Open MPI's OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM) are set; otherwise nothing is.
#
# Rows of one part (transport T, precision P), in this order (the most wanted first, PyTorch's
# twin right after the vitddp row it mirrors; key = file name):
#   noddp          1 rank, --no-ddp (first part of each precision in the invocation) + PyTorch (nvlink)
#   b25-np1        DDP on 1 rank, 25 MiB buckets (nvlink only)
#   b25-np2 [-np4] the scaling column: 25 MiB buckets on 2 (and 4 when NP=8) ranks (nvlink, shm)
#   b25            25 MiB buckets on NP ranks (the target row)           + PyTorch static+view, 25 MB
#   b25-ce         25 MiB buckets all-reduced by the copy engines (--allreduce copy-engine; nvlink
#                  only: peer-to-peer copies ignore NCCL's transport settings)
#   b2000-copy     one 2000 MB bucket, --grad-as-bucket-view off          + PyTorch DDP defaults
#   b2000          one 2000 MB bucket (view on, vitddp's default)         + PyTorch static+view
#   b2000-bf16     + --compression bf16                                   + PyTorch bf16_compress_hook
#   b2000-powersgd + --compression powersgd --powersgd-start-step 2       + PyTorch powerSGD_hook
#   b25-bf16, b25-powersgd, b100, b500, and b1 when NP=8
# Estimated times (the plan prints them per row; model: start-up 6 s + 0.5 s/rank for vitddp,
# 20 s + 1 s/rank for PyTorch; steps at our 1-GPU 13.6 (fp32) / 90.9 (bf16) steps/s, PyTorch's
# 11.9 / 13, plus the all-reduce of 1.226 GB at 300 (NVLink) / 27 (SHM) / 3 (NET) GB/s bus
# bandwidth, hidden behind backward except with one bucket):
#   NP=4: nvlink fp32 5.0 min, nvlink bf16 4.5, shm fp32 4.4, net fp32 4.7 -> 18.6 min
#   NP=8: nvlink fp32 + --slurm-train 6.3 min, nvlink bf16 5.5, shm fp32 5.5, net fp32 5.8 -> 23.1 min
# Writes DIR/article-np<NP>-<transports>-<precisions>.tar.gz (split into .part-aa, -ab ... if
# over 15 MiB): article_table.log (one line per run), plan.txt, env.txt, manifest.tsv (one line per
# run: transport, precision, impl, key, ranks, exit code, wall s, estimate s, file), table.md
# (results/article_table.py) and runs/<T>-<P>-<key>.{h5,log} (vitddp) / torch-<T>-<P>-<key>.{json,log}.
# --readme DIR tabulates DIR's article-*.tar.gz files, or the manifest.tsv and HDF5 files of its
# h5.tar.xz, with results/article_table.py, and adds one row per results file
# (results/tools/topic_readme.py).
set -u -o pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
CPU=${VITDDP_ARTICLE_CPU:-0}
VITDDP=${VITDDP:-build/vitddp}
PY=${PYTHON:-python3}

export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi

# ---- --readme DIR: the table of a folder's runs into DIR/README.md
if [ "${1:-}" = --readme ]; then
  [ $# -eq 2 ] && [ -d "$2" ] || { echo "interconnects.sh: usage: $0 --readme DIR (an existing folder)" >&2; exit 2; }
  dir=$2; t=$(mktemp -d); inputs=()
  for f in "$dir"/article-*.tar.gz "$dir"/article-*.part-aa; do [ -e "$f" ] && inputs+=("$f"); done
  if [ -f "$dir/h5.tar.xz" ]; then  # unpacked under the folder's name, which the table quotes
    mkdir -p "$t/$(basename "$dir")" && tar xJf "$dir/h5.tar.xz" -C "$t/$(basename "$dir")" && inputs+=("$t/$(basename "$dir")")
  fi
  [ ${#inputs[@]} -gt 0 ] || { echo "interconnects.sh: $dir: no article-*.tar.gz and no h5.tar.xz" >&2; exit 2; }
  "$PY" "$REPO/results/article_table.py" "${inputs[@]}" --no-plots -o "$t/table.md" > /dev/null || exit $?
  sed -i 's/^# The article/## The article/' "$t/table.md"
  cat > "$t/about.md" <<'MD'
The article's table ("Optimizing data transfer in distributed AI/ML training workloads": PyTorch
DDP on ViT-L/32) re-created with vitddp: ViT-L/32, batch 32 per GPU, synthetic data, per
interconnect: `nvlink` (NCCL's default, `P2P/CUMEM`), `shm` (`NCCL_P2P_DISABLE=1`: through host
memory, `SHM/direct/direct`, the article's PCIe machine) and `net` (`+ NCCL_SHM_DISABLE=1`:
`NET/Socket`); the transport each rank used is the file's `nccl_transport` attribute. Rows: no DDP,
one 2000 MB bucket with bucket copies (PyTorch's defaults), + gradient_as_bucket_view, + bf16
compression, + PowerSGD (rank 1, from step 2), and bucket sizes 1-500 MB with and without bf16.
The table is `results/article_table.py`'s; below it one row per results file.
MD
  "$PY" "$REPO/results/tools/topic_readme.py" "$dir" --title "The article's table: interconnects x buckets x compression" \
    --about "$t/about.md" --command "bash results/commands/interconnects.sh NP TRANSPORT... --out OUT" \
    --rewrite "bash results/commands/interconnects.sh --readme DIR" --baseline noddp --include "$t/table.md"
  rc=$?; rm -rf "$t"; [ $rc -eq 0 ] && echo "wrote $dir/README.md"; exit $rc
fi

usage() { sed -n '8,30p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }
NP=""; TRANSPORTS=""; PRECISIONS="fp32"; TORCH=1; PLAN=0; SLURM=0; BUDGET=540
while [ $# -gt 0 ]; do
  case $1 in
    --precisions) PRECISIONS=$2; shift ;;
    --no-torch) TORCH=0 ;;
    --plan) PLAN=1 ;;
    --slurm-train) SLURM=1 ;;
    --budget) BUDGET=$2; shift ;;
    --out) OUT=$2; shift ;;
    -h|--help) usage 0 ;;
    nvlink|shm|net) TRANSPORTS="$TRANSPORTS $1" ;;
    [0-9]*) [ -z "$NP" ] || usage; NP=$1 ;;
    *) echo "interconnects.sh: unknown argument '$1'" >&2; usage ;;
  esac
  shift
done
[ -n "$NP" ] && [ "$NP" -ge 2 ] 2>/dev/null || { echo "interconnects.sh: NP (>= 2) first" >&2; usage; }
[ -n "$TRANSPORTS" ] || [ $SLURM = 1 ] || { echo "interconnects.sh: no TRANSPORT" >&2; usage; }
for p in $PRECISIONS; do
  case $p in fp32|tf32|bf16) ;; *) echo "interconnects.sh: bad precision '$p'" >&2; exit 2 ;; esac
done
MPI_EXTRA=""
if [ "$CPU" = 1 ]; then
  [ "$NP" = 2 ] || echo "note: VITDDP_ARTICLE_CPU=1 runs NP=2 (asked: $NP)"
  NP=2; TORCH=${VITDDP_ARTICLE_CPU_TORCH:-0}; TRANSPORTS=$([ -n "$TRANSPORTS" ] && echo " cpu"); MPI_EXTRA="--oversubscribe"
fi
TAG="np$NP$(for t in $TRANSPORTS; do printf -- "-%s" "$t"; done)$(for p in $PRECISIONS; do printf -- "-%s" "$p"; done)"
[ $SLURM = 1 ] && [ -z "$TRANSPORTS" ] && TAG="np$NP-slurm"
MPIRUN=${MPIRUN:-mpirun}
MPI="$MPIRUN --bind-to none $MPI_EXTRA -x NCCL_NVLS_ENABLE=0 -x TORCH_SYMM_MEM_DISABLE_MULTICAST=1 -x NVSHMEM_DISABLE_NVLS=1 -x PYTHONUNBUFFERED=1"

# ---- what each row is
transport_env() {
  case $1 in
    nvlink|cpu) echo "" ;;
    shm) echo "-x NCCL_P2P_DISABLE=1" ;;
    net) echo "-x NCCL_P2P_DISABLE=1 -x NCCL_SHM_DISABLE=1" ;;
  esac
}
steps_of() {  # steps_of TRANSPORT -> "WARMUP STEPS"
  if [ "$CPU" = 1 ]; then echo "${WARMUP:-1} ${STEPS:-2}"
  elif [ "$1" = net ]; then echo "${WARMUP:-3} ${STEPS:-5}"
  else echo "${WARMUP:-10} ${STEPS:-20}"; fi
}
# rows TRANSPORT PRECISION FIRST_OF_PRECISION: one line per run: IMPL KEY RANKS ARGS...
rows() {
  local t=$1 p=$2 first=$3 n
  if [ "$first" = 1 ]; then
    echo "vitddp noddp 1 --no-ddp"
    [ $TORCH = 1 ] && { [ "$t" = nvlink ] || [ "$t" = cpu ]; } && echo "torch noddp 1 --no-ddp"
  fi
  [ "$t" = nvlink ] || [ "$t" = cpu ] && echo "vitddp b25-np1 1 --bucket-cap-mb 25"
  if [ "$t" != net ]; then
    for n in 2 4 8; do [ $n -lt "$NP" ] && echo "vitddp b25-np$n $n --bucket-cap-mb 25"; done
  fi
  echo "vitddp b25 $NP --bucket-cap-mb 25"
  [ $TORCH = 1 ] && echo "torch b25 $NP --bucket-cap-mb 25 --static-graph --grad-as-bucket-view"
  [ "$t" = nvlink ] && echo "vitddp b25-ce $NP --bucket-cap-mb 25 --allreduce copy-engine"
  echo "vitddp b2000-copy $NP --bucket-cap-mb 2000 --grad-as-bucket-view off"
  [ $TORCH = 1 ] && echo "torch b2000-copy $NP --bucket-cap-mb 2000"
  echo "vitddp b2000 $NP --bucket-cap-mb 2000"
  [ $TORCH = 1 ] && echo "torch b2000 $NP --bucket-cap-mb 2000 --static-graph --grad-as-bucket-view"
  echo "vitddp b2000-bf16 $NP --bucket-cap-mb 2000 --compression bf16"
  [ $TORCH = 1 ] && echo "torch b2000-bf16 $NP --bucket-cap-mb 2000 --static-graph --grad-as-bucket-view --comm-hook bf16"
  echo "vitddp b2000-powersgd $NP --bucket-cap-mb 2000 --compression powersgd --powersgd-start-step 2"
  [ $TORCH = 1 ] && echo "torch b2000-powersgd $NP --bucket-cap-mb 2000 --static-graph --grad-as-bucket-view --comm-hook powersgd --powersgd-start-iter 2"
  echo "vitddp b25-bf16 $NP --bucket-cap-mb 25 --compression bf16"
  echo "vitddp b25-powersgd $NP --bucket-cap-mb 25 --compression powersgd --powersgd-start-step 2"
  echo "vitddp b100 $NP --bucket-cap-mb 100"
  echo "vitddp b500 $NP --bucket-cap-mb 500"
  [ "$NP" -ge 8 ] && echo "vitddp b1 $NP --bucket-cap-mb 1"
  return 0
}
# estimate IMPL TRANSPORT PRECISION RANKS ARGS... -> seconds (integer), the model in the header
estimate() {
  local impl=$1 t=$2 p=$3 n=$4; shift 4
  local args=" $* " one=0 comp=none w s
  case $args in *" --bucket-cap-mb 2000 "*) one=1 ;; esac
  case $args in *"bf16"*) comp=bf16 ;; *"powersgd"*) comp=powersgd ;; esac
  read -r w s <<<"$(steps_of "$t")"
  if [ "$CPU" = 1 ]; then [ "$impl" = torch ] && echo 40 || echo 2; return; fi
  awk -v impl="$impl" -v t="$t" -v p="$p" -v n="$n" -v one=$one -v comp=$comp -v steps=$((w + s)) -v ddp="$([[ $args == *--no-ddp* ]] && echo 0 || echo 1)" 'BEGIN {
    c = (p == "bf16") ? 1 / 90.9 : (p == "tf32") ? 1 / 52 : 1 / 13.6          # our compute per step
    if (impl == "torch") c = (p == "fp32") ? 1 / 11.9 : (ddp ? 1 / 13 : 1 / 19.6)
    bw = (t == "shm") ? 27e9 : (t == "net") ? 3e9 : 300e9
    a = (n > 1 && ddp) ? 2 * (n - 1) / n * 1.226e9 / bw : 0             # fp32 all-reduce, s
    if (comp == "bf16") a = a / 2 + 0.004
    if (comp == "powersgd" && a > 0) a = 0.025 + (impl == "torch" ? 0.01 : 0) + 2 * a / steps
    step = one ? c + a : ((c > a) ? c + 0.15 * a : a + 0.15 * c)
    up = (impl == "torch") ? 20 + n : 6 + 0.5 * n + (t == "net" ? 2 : 0)
    printf "%d\n", up + steps * step + 0.999 }'
}
ALL_ROWS=()   # "T P IMPL KEY RANKS EST ARGS..."
for p in $PRECISIONS; do
  first=1
  for t in $TRANSPORTS; do
    while read -r impl key n args; do
      [ -n "$impl" ] || continue
      ALL_ROWS+=("$t $p $impl $key $n $(estimate "$impl" "$t" "$p" "$n" $args) $args")
    done < <(rows "$t" "$p" $first)
    first=0
  done
done
SLURM_EST=$([ "$CPU" = 1 ] && echo 3 || echo $((8 + NP)))

print_plan() {
  local sum=0 r t p impl key n est args
  echo "interconnects.sh $NP$TRANSPORTS --precisions \"$PRECISIONS\"$([ $TORCH = 0 ] && echo " --no-torch")$([ $SLURM = 1 ] && echo " --slurm-train"): $TAG, budget $BUDGET s$([ "$CPU" = 1 ] && echo ", CPU test mode")"
  printf "%-7s %-5s %-6s %-15s %5s %6s %7s  %s\n" transport prec impl key ranks est_s cum_s "arguments"
  for r in "${ALL_ROWS[@]}"; do
    read -r t p impl key n est args <<<"$r"
    sum=$((sum + est))
    printf "%-7s %-5s %-6s %-15s %5s %6s %7s  %s%s\n" "$t" "$p" "$impl" "$key" "$n" "$est" "$sum" "$args" \
      "$([ $sum -gt "$BUDGET" ] && echo "   (past the budget: would be skipped)")"
  done
  if [ $SLURM = 1 ]; then
    sum=$((sum + SLURM_EST))
    printf "%-7s %-5s %-6s %-15s %5s %6s %7s  %s\n" nvlink fp32 sbatch slurm-train "$NP" "$SLURM_EST" "$sum" "bash slurm/train.sbatch (srun -> mpirun)"
  fi
  echo "estimated total: $sum s ($(awk -v s=$sum 'BEGIN { printf "%.1f", s / 60 }') min) of the $BUDGET s budget; add ~10 s for the environment record and the tar"
}
if [ $PLAN = 1 ]; then print_plan; exit 0; fi

[ -n "${OUT:-}" ] || { echo "interconnects.sh: --out DIR (or OUT) names no folder for the tar" >&2; exit 2; }
[ -x "$VITDDP" ] || { echo "interconnects.sh: no vitddp binary at $VITDDP (set VITDDP)" >&2; exit 2; }
VITDDP=$(cd "$(dirname "$VITDDP")" && pwd)/$(basename "$VITDDP")
D=$OUT/article-$TAG
rm -rf "$D"; mkdir -p "$D/runs"
LOG=$D/article_table.log
START=$(date +%s)
elapsed() { echo $(($(date +%s) - START)); }
print_plan > "$D/plan.txt"
{
  date -u; hostname; nproc; echo "vitddp: $("$VITDDP" --version 2>&1 | head -1)"; git -C "$REPO" log -1 --oneline 2>/dev/null
  if [ "$CPU" != 1 ]; then nvidia-smi -L; nvidia-smi topo -m; fi
} > "$D/env.txt" 2>&1
printf "transport\tprecision\timpl\tkey\tranks\trc\twall_s\test_s\tfile\n" > "$D/manifest.tsv"
status=0
port=$((29500 + RANDOM % 200))

run_row() {  # run_row T P IMPL KEY RANKS EST ARGS...
  local t=$1 p=$2 impl=$3 key=$4 n=$5 est=$6; shift 6
  local w s env file log rc t0 wall left limit line
  read -r w s <<<"$(steps_of "$t")"
  env=$(transport_env "$t")
  left=$((BUDGET - $(elapsed)))
  if [ "$est" -gt "$left" ]; then
    echo "$t $p $impl $key: SKIPPED (estimate $est s, $left s of the budget left)" | tee -a "$LOG"
    printf "%s\t%s\t%s\t%s\t%s\tskipped\t0\t%s\t\n" "$t" "$p" "$impl" "$key" "$n" "$est" >> "$D/manifest.tsv"
    return
  fi
  limit=$((3 * est + 30)); [ $limit -gt $((left + 40)) ] && limit=$((left + 40))
  t0=$(date +%s)
  if [ "$impl" = vitddp ]; then
    file=runs/$t-$p-$key.h5; log=$D/runs/$t-$p-$key.log
    local pa="--precision $p" ca="--data device"
    [ "$CPU" = 1 ] && pa="" && ca="--backend cpu --model vit_micro --data synthetic"
    echo "+ $MPI $env -np $n $VITDDP $* $pa $ca --warmup-steps $w --steps $s --cooldown-steps 0 --progress-every 100 --overwrite --out $D/$file" > "$log"
    timeout -k 10 $limit $MPI $env -np "$n" "$VITDDP" "$@" $pa $ca --warmup-steps "$w" --steps "$s" --cooldown-steps 0 \
      --progress-every 100 --overwrite --out "$D/$file" >> "$log" 2>&1
    rc=$?
    line="$(grep -o '[0-9.]* steps/s per rank' "$log" | head -1) $(grep -o 'NCCL transport: .*' "$log" | head -1)"
  else
    file=runs/torch-$t-$p-$key.json; log=$D/runs/torch-$t-$p-$key.log
    port=$((port + 1))
    local cmd=("$PY" "$REPO/results/bench_torch_ddp.py" "$@" --precision "$p" --warmup-steps "$w" --steps "$s" --json "$D/$file")
    [ "$CPU" = 1 ] && cmd+=(--device cpu --model vit_b_32 --batch-size 2 --image-size 64)
    if [ "$n" = 1 ] && [[ " $* " == *" --no-ddp "* ]]; then
      echo "+ ${cmd[*]}" > "$log"
      timeout -k 10 $limit "${cmd[@]}" >> "$log" 2>&1
    else
      echo "+ $MPI $env -np $n ${cmd[*]} --master-port $port" > "$log"
      timeout -k 10 $limit $MPI $env -np "$n" "${cmd[@]}" --master-port $port >> "$log" 2>&1
    fi
    rc=$?
    line=$(grep -o 'steps_per_s=[0-9.]*' "$log" | head -1)
  fi
  wall=$(($(date +%s) - t0))
  [ $rc -eq 0 ] || status=1
  echo "$t $p $impl $key ($n ranks): exit $rc, $wall s (est $est) $line" | tee -a "$LOG"
  printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n" "$t" "$p" "$impl" "$key" "$n" "$rc" "$wall" "$est" "$file" >> "$D/manifest.tsv"
}

# slurm/train.sbatch as it is: bash runs the script with an srun on PATH that starts the same
# command under mpirun (-np = SLURM_NTASKS; --cpu-bind=cores + --cpus-per-task=C -> one rank per
# C cores when the machine has them, else --bind-to none), in a submit directory whose
# build/vitddp is the carried binary. Records the log, the translated command and the file.
slurm_train() {
  local sb=$REPO/slurm/train.sbatch d=$D/slurm cpus rc t0 left limit
  cpus=$(sed -n -E 's/^#SBATCH[[:space:]]+--cpus-per-task(=|[[:space:]]+)([0-9]+).*/\2/p' "$sb" | tail -1)
  left=$((BUDGET - $(elapsed)))
  if [ "$SLURM_EST" -gt "$left" ]; then echo "slurm-train: SKIPPED ($left s of the budget left)" | tee -a "$LOG"; return; fi
  limit=$((3 * SLURM_EST + 30)); [ $limit -gt $((left + 40)) ] && limit=$((left + 40))
  mkdir -p "$d/build" "$d/bin"
  ln -sf "$VITDDP" "$d/build/vitddp"
  cat > "$d/bin/srun" <<EOF
#!/usr/bin/env bash
# srun stand-in for interconnects.sh: srun [options] CMD... -> mpirun -np \$SLURM_NTASKS CMD...
c=1; bind=""
while [ \$# -gt 0 ]; do
  case \$1 in
    --cpus-per-task=*) c=\${1#*=} ;;
    -c|--cpus-per-task) c=\$2; shift ;;
    --cpu-bind=*) bind=\${1#*=} ;;
    --mpi=*|--export=*|--kill-on-bad-exit*|--label|-l) ;;
    -*) echo "srun shim: ignoring \$1" >&2 ;;
    *) break ;;
  esac
  shift
done
n=\${SLURM_NTASKS:-1}
cores=\$(lscpu -p=core 2>/dev/null | grep -v '^#' | sort -u | wc -l)
if [ "\$bind" = cores ] && [ "\$cores" -ge \$((n * c)) ]; then map="--map-by slot:PE=\$c --bind-to core"; else map="--bind-to none"; fi
unset \$(env | grep -o '^SLURM[A-Z_]*')   # mpirun must not take this for a Slurm allocation
if [ "\$map" != "--bind-to none" ] && ! $MPIRUN -np \$n \$map true >/dev/null 2>&1; then
  echo "srun shim: mpirun refused '\$map' on this machine (\$cores cores): --bind-to none" >&2; map="--bind-to none"
fi
echo "[srun shim] $MPIRUN -np \$n \$map $MPI_EXTRA -x NCCL_NVLS_ENABLE \$*" >&2
exec $MPIRUN -np \$n \$map $MPI_EXTRA -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST=1 "\$@"
EOF
  chmod +x "$d/bin/srun"
  local extra=""
  [ "$CPU" = 1 ] && extra="--backend cpu --model vit_micro --data synthetic --warmup-steps 1 --steps 2 --cooldown-steps 0"
  t0=$(date +%s)
  ( cd "$d" && PATH=$d/bin:$PATH SLURM_SUBMIT_DIR=$d SLURM_JOB_ID=article-np$NP SLURM_CPUS_PER_TASK=$cpus \
      SLURM_NTASKS=$NP SLURM_JOB_NUM_NODES=1 VITDDP_ARGS=${VITDDP_ARGS:-$extra} \
      timeout -k 10 $limit bash "$sb" ) > "$D/runs/slurm-train.log" 2>&1
  rc=$?
  [ $rc -eq 0 ] || status=1
  mv "$d/results/runs/slurm-article-np$NP.h5" "$D/runs/slurm-train.h5" 2>/dev/null
  cp "$sb" "$D/runs/slurm-train.sbatch"
  rm -rf "$d"
  echo "slurm-train (slurm/train.sbatch, $NP ranks): exit $rc, $(($(date +%s) - t0)) s $(grep -o '[0-9.]* steps/s per rank' "$D/runs/slurm-train.log" | head -1) $(grep -o 'NCCL transport: .*' "$D/runs/slurm-train.log" | head -1)" | tee -a "$LOG"
  printf "%s\tfp32\tsbatch\tslurm-train\t%s\t%s\t%s\t%s\truns/slurm-train.h5\n" "$([ "$CPU" = 1 ] && echo cpu || echo nvlink)" "$NP" "$rc" "$(($(date +%s) - t0))" "$SLURM_EST" >> "$D/manifest.tsv"
}

cat "$D/plan.txt"
for r in "${ALL_ROWS[@]}"; do
  # shellcheck disable=SC2086
  run_row $r
done
[ $SLURM = 1 ] && slurm_train
echo "done in $(elapsed) s" | tee -a "$LOG"
if "$PY" "$REPO/results/article_table.py" "$D" --no-plots > "$D/table.md" 2> "$D/table.err"; then
  cat "$D/table.md"
else
  echo "article_table.py failed: $(tail -3 "$D/table.err")"
fi
[ -s "$D/table.err" ] || rm -f "$D/table.err"
TAR=$OUT/article-$TAG.tar.gz
tar -C "$OUT" -czf "$TAR" "article-$TAG" && rm -rf "$D"
if [ "$(stat -c %s "$TAR")" -gt $((15 * 1024 * 1024)) ]; then  # parts of at most 15 MiB, easy to move between machines
  split -b 15M "$TAR" "$TAR.part-" && rm -f "$TAR"
  echo "split: $(ls "$TAR".part-*) (cat them | tar -xz)"
fi
ls -l "$OUT"
echo "exit $status"
exit $status
