#!/usr/bin/env bash
# slurm/long.sbatch as it is, run by bash with an srun stand-in (mpirun -np 2) in a scratch submit
# directory, CPU backend, vit_micro, 8 steps, a checkpoint every 2 steps:
#  - start 0 loses rank 1 inside step 5 (--debug-fail-at-step): the script fails, the step-4
#    checkpoint stays;
#  - start 1 (what Slurm's requeue runs, same job id) says it resumes from that checkpoint, finishes
#    (exit 0) and writes results/runs/long-<job>-start1.h5 and a step-8 checkpoint;
#  - its training/loss of steps 5..8 is bit-identical to an uninterrupted run's.
# Usage: slurm_requeue_test.sh <vitddp> <mpirun> <python3 with h5py>
set -u
BIN=$1
source "$(dirname "$0")/test_util.sh" "$2"
PY=$3
REPO=$(cd "$(dirname "$0")/.." && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
D=$TMP/submit
mkdir -p "$D/build" "$D/bin"
ln -s "$BIN" "$D/build/vitddp"
cat > "$D/bin/srun" <<SHIM
#!/usr/bin/env bash
# srun stand-in: drop srun's options, start the command on 2 ranks.
while [ \$# -gt 0 ]; do case \$1 in -*) shift ;; *) break ;; esac; done
exec $MPIRUN -np 2 "\$@"
SHIM
chmod +x "$D/bin/srun"
ARGS="--backend cpu --model vit_micro --batch-size 4 --warmup-steps 0 --steps 8 --cooldown-steps 0 --progress-every 100 --init random"
# start N EXTRA: runs the script as Slurm's start N of job 4242; log in $TMP/startN.log.
start() {
  (cd "$D" && PATH="$D/bin:$PATH" SLURM_SUBMIT_DIR="$D" SLURM_JOB_ID=4242 SLURM_RESTART_COUNT=$1 \
     SLURM_CPUS_PER_TASK=1 CKPT_EVERY=2 VITDDP_ARGS="$ARGS $2" timeout -k 10 120 bash "$REPO/slurm/long.sbatch") \
    > "$TMP/start$1.log" 2>&1
}
CKPT="$D/checkpoints/long-4242.h5"
ckpt_step() { "$PY" -c 'import h5py, sys; print(int(h5py.File(sys.argv[1], "r").attrs["step"]))' "$1" 2>/dev/null; }

start 0 "--debug-fail-at-step 5 --debug-fail-rank 1 --debug-fail-mode exit"
rc=$?
if [ $rc -ne 0 ] && [ "$(ckpt_step "$CKPT")" = 4 ] && grep -q "no checkpoint yet" "$TMP/start0.log"; then
  ok "start 0: fails in step 5 (exit $rc), checkpoint of step 4 kept"
else bad "start 0: rc=$rc, checkpoint step '$(ckpt_step "$CKPT")': $(tail -5 "$TMP/start0.log")"; fi

start 1 ""
rc=$?
if [ $rc -eq 0 ] && grep -q "resuming from checkpoints/long-4242.h5" "$TMP/start1.log" &&
   [ -s "$D/results/runs/long-4242-start1.h5" ] && [ "$(ckpt_step "$CKPT")" = 8 ]; then
  ok "start 1 (requeued): resumes from the checkpoint, exit 0, results file, step-8 checkpoint"
else bad "start 1: rc=$rc, checkpoint step '$(ckpt_step "$CKPT")': $(tail -5 "$TMP/start1.log")"; fi

timeout -k 10 120 $MPIRUN -np 2 "$BIN" $ARGS --data-workers 1 --out "$TMP/full.h5" > "$TMP/full.log" 2>&1
same=$("$PY" - "$TMP/full.h5" "$D/results/runs/long-4242-start1.h5" <<'PY' 2>&1
import sys, h5py, numpy as np
full = h5py.File(sys.argv[1], "r")["training/loss"][()]
resumed = h5py.File(sys.argv[2], "r")["training/loss"][()]
k = resumed.shape[1]
print("same" if k == 4 and np.array_equal(full[:, -k:], resumed) else f"differ: {full[:, -k:]} vs {resumed}")
PY
)
if [ "$same" = same ]; then ok "steps 5..8 of the requeued start are bit-identical to an uninterrupted run's"
else bad "requeued losses vs uninterrupted: $same"; fi
finish
