# A/B jobs (device_session*.sh, from session 7 on): source after setting JOB (output folder name under
# /tmp, tarred into $OUT/$JOB.tgz by ab_finish). Binaries from carry/bins.tar.xz.
# vitddp ViT-L/32 batch 32, data on the GPU, 10 warm-up + 100 timed steps per run.
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
: "${JOB:?lib_ab.sh: set JOB first}"
W=/tmp/$JOB; rm -rf "$W"; mkdir -p "$W"
[ -f carry/bins.tar.xz ] && tar xJf carry/bins.tar.xz -C carry
COMMON="--data device --warmup-steps 10 --steps 100 --cooldown-steps 0 --progress-every 1000 --overwrite"

# ab NAME NP PRECISION BINARY [vitddp options]: one run of carry/BINARY into $W/NAME.h5 (1 rank
# runs --no-ddp); prints its timed-window line.
ab() {
  local name=$1 n=$2 p=$3 bin=$4; shift 4
  local ddp=""; [ "$n" = 1 ] && ddp="--no-ddp"
  timeout 120 mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -np "$n" "carry/$bin" $ddp --precision "$p" "$@" $COMMON \
    --out "$W/$name.h5" 2>&1 | grep -E "timed window|rror" | sed "s/^/$name: /"
}

# solo NAME GPU PRECISION [vitddp options]: one 1-GPU run (--no-ddp) of carry/vitddp on GPU number
# GPU alone (CUDA_VISIBLE_DEVICES) into $W/NAME.h5; prints its timed-window line.
solo() {
  local name=$1 gpu=$2 p=$3; shift 3
  CUDA_VISIBLE_DEVICES=$gpu timeout 120 mpirun --bind-to none -x CUDA_VISIBLE_DEVICES -x NCCL_NVLS_ENABLE=0 -np 1 \
    carry/vitddp --no-ddp --precision "$p" "$@" $COMMON --out "$W/$name.h5" 2>&1 | grep -E "timed window|rror" |
    sed "s/^/$name: /"
}

# ab_tests: every GPU test of carry/gpu_tests (1 GPU) and carry/gpu_mpi_tests (2 ranks), logs in $W.
ab_tests() {
  echo "== gpu_tests"
  timeout 300 carry/gpu_tests > "$W/gpu_tests.log" 2>&1
  echo "gpu_tests exit $?"; tail -3 "$W/gpu_tests.log"
  echo "== gpu_mpi_tests"
  timeout 200 mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -np 2 carry/gpu_mpi_tests > "$W/gpu_mpi_tests.log" 2>&1
  echo "gpu_mpi_tests exit $?"; grep -a "assertions\|FAILED\|failed" "$W/gpu_mpi_tests.log" | head -20
}

# ab_tests_subset FILTER: carry/gpu_tests with a Catch2 test filter ("[gelu],[gpu_vit]"), log in $W.
ab_tests_subset() {
  echo "== gpu_tests $1"
  timeout 200 carry/gpu_tests "$1" > "$W/gpu_tests.log" 2>&1
  echo "gpu_tests exit $?"; tail -3 "$W/gpu_tests.log"
}

# ab_bench BINARY...: bench_gpu_ops of each gpu_tests binary, the lines of the named kernels.
ab_bench() {
  local b
  for b in "$@"; do
    echo "== bench_gpu_ops, $b"
    timeout 120 "carry/$b" "bench: per-operation times at vit_l_32 batch-32 shapes" 2>&1 |
      grep -E "layernorm|column_sum|BGRADB|gelu"
  done
}

# ab_rounds NB NT: interleaved 1-GPU rounds of carry/vitddp_base and carry/vitddp, round r running
# bf16 (r <= NB) then tf32 (r <= NT), into $W/<precision>-{base,new}-r<r>.h5.
ab_rounds() {
  local nb=$1 nt=$2 r
  for ((r = 1; r <= (nb > nt ? nb : nt); ++r)); do
    if [ "$r" -le "$nb" ]; then ab bf16-base-r$r 1 bf16 vitddp_base; ab bf16-new-r$r 1 bf16 vitddp; fi
    if [ "$r" -le "$nt" ]; then ab tf32-base-r$r 1 tf32 vitddp_base; ab tf32-new-r$r 1 tf32 vitddp; fi
  done
}

# ab_bench_speed: the speed benchmark (bench_speed.sh) into $W/bench, its HDF5 files repacked.
ab_bench_speed() {
  mkdir -p "$W/bench"
  OUT=$W/bench timeout 420 bash results/commands/bench_speed.sh
  local f
  for f in "$W"/bench/*.h5; do h5repack -f SHUF -f GZIP=4 "$f" "$f.z" 2>/dev/null && mv "$f.z" "$f"; done
}

ab_finish() { tar czf "$OUT/$JOB.tgz" -C /tmp "$JOB"; }
