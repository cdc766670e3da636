#!/usr/bin/env bash
# slurm/long.sbatch as sbatch runs it: a copy of the script in a spool folder, started from another
# directory, SLURM_SUBMIT_DIR an empty submit directory, stand-ins for srun (mpirun -np 2) and
# scontrol (logs its calls; "show job" names the script in a stand-in repository R that holds a
# copy of slurm/ and build/vitddp), CPU backend, vit_micro.
#  A. Requeue after a failure (node failure, preemption), with the binary found through scontrol's
#     script path (R/build/vitddp): start 0 loses rank 1 inside step 5 (--debug-fail-at-step), the
#     script fails and the step-4 checkpoint stays in the submit directory; start 1 (what Slurm's
#     requeue runs, same job id) says it resumes from that checkpoint, finishes (exit 0) and
#     writes results/runs/long-<job>-start1.h5 and a step-8 checkpoint; its training/loss of
#     steps 5..8 is bit-identical to an uninterrupted run's.
#  B. The time limit: SIGUSR1 to the batch shell (what --signal=B:USR1@120 sends) while vitddp
#     runs, with VITDDP and CKPT from the environment: vitddp stops after a step with a checkpoint
#     of it (stop_reason "signal 15 after step N", N the 0-based index of the last step done), the script runs `scontrol requeue <job>` and
#     exits 0.
#  C. A resubmitted job (another job id) given CKPT=<that checkpoint> resumes from it at step N
#     and completes the run.
# Usage: slurm_requeue_test.sh <vitddp> <mpirun> <python3 with h5py>
set -u
BIN=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
source "$(dirname "$0")/test_util.sh" "$2"
PY=$3
REPO=$(cd "$(dirname "$0")/.." && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
D=$TMP/submit
R=$TMP/repo
mkdir -p "$D" "$R/build" "$TMP/bin" "$TMP/spool" "$TMP/elsewhere"
cp -r "$REPO/slurm" "$R/slurm"
cp "$REPO/CMakeLists.txt" "$R/"
ln -s "$BIN" "$R/build/vitddp"
cp "$REPO/slurm/long.sbatch" "$TMP/spool/slurm_script"  # sbatch runs a copy, away from the repository
cat > "$TMP/bin/srun" <<SHIM
#!/usr/bin/env bash
# srun stand-in: drop srun's options, start the command on 2 ranks. SIGTERM goes to the ranks
# themselves, as srun passes it to its tasks and then leaves them Slurm's KillWait (30 s) to
# finish; mpirun would pass it on and kill them 1 s later (odls_base_sigkill_timeout), too soon
# for a step, a checkpoint and an fsync on a loaded machine.
while [ \$# -gt 0 ]; do case \$1 in -*) shift ;; *) break ;; esac; done
$MPIRUN -np 2 "\$@" &
mp=\$!
trap 'pkill -TERM -P \$mp' TERM
while :; do
  wait \$mp && rc=0 || rc=\$?
  kill -0 \$mp 2>/dev/null || break
done
exit \$rc
SHIM
cat > "$TMP/bin/scontrol" <<SHIM
#!/usr/bin/env bash
# scontrol stand-in: logs every call; "show job" names the job script as sbatch was given it.
echo "\$*" >> "$TMP/scontrol.log"
if [ "\$1" = show ]; then echo "   Command=$R/slurm/long.sbatch"; echo "   WorkDir=$D"; fi
SHIM
chmod +x "$TMP/bin/srun" "$TMP/bin/scontrol"
ARGS="--backend cpu --model vit_micro --batch-size 4 --warmup-steps 0 --cooldown-steps 0 --progress-every 100 --init random"
# start LOG JOB RESTART EXTRA-ENV...: the spooled script as Slurm's start RESTART of job JOB, from
# an unrelated directory; stdout and stderr in $TMP/LOG.log. Runs in the background: pid in $PID.
start_bg() {
  local log=$1 job=$2 restart=$3
  shift 3
  (cd "$TMP/elsewhere" && env PATH="$TMP/bin:$PATH" SLURM_SUBMIT_DIR="$D" SLURM_JOB_ID="$job" \
     SLURM_RESTART_COUNT="$restart" SLURM_CPUS_PER_TASK=1 "$@" \
     timeout -k 10 120 bash "$TMP/spool/slurm_script") > "$TMP/$log.log" 2>&1 &
  PID=$!
}
start() { start_bg "$@"; wait $PID; }
h5() { "$PY" -c "import h5py, sys; f = h5py.File(sys.argv[1], 'r'); print($2)" "$1" 2>/dev/null; }
ckpt_step() { h5 "$1" 'int(f.attrs["step"])'; }

# A. requeue after a failure, with the default checkpoint path and the repository's build/vitddp
CKPT_A="$D/checkpoints/long-4242.h5"
start A0 4242 0 CKPT_EVERY=2 VITDDP_ARGS="$ARGS --steps 8 --debug-fail-at-step 5 --debug-fail-rank 1 --debug-fail-mode exit"
rc=$?
if [ $rc -ne 0 ] && [ "$(ckpt_step "$CKPT_A")" = 4 ] && grep -q "no checkpoint yet" "$TMP/A0.log"; then
  ok "A, start 0 (binary found through scontrol's script path): fails in step 5 (exit $rc), checkpoint of step 4 kept"
else bad "A, start 0: rc=$rc, checkpoint step '$(ckpt_step "$CKPT_A")': $(tail -5 "$TMP/A0.log")"; fi

start A1 4242 1 CKPT_EVERY=2 VITDDP_ARGS="$ARGS --steps 8"
rc=$?
if [ $rc -eq 0 ] && grep -q "resuming from checkpoints/long-4242.h5" "$TMP/A1.log" &&
   [ -s "$D/results/runs/long-4242-start1.h5" ] && [ "$(ckpt_step "$CKPT_A")" = 8 ]; then
  ok "A, start 1 (requeued): resumes from the checkpoint, exit 0, results file, step-8 checkpoint"
else bad "A, start 1: rc=$rc, checkpoint step '$(ckpt_step "$CKPT_A")': $(tail -5 "$TMP/A1.log")"; fi

timeout -k 10 120 $MPIRUN -np 2 "$BIN" $ARGS --steps 8 --data-workers 1 --out "$TMP/full.h5" > "$TMP/full.log" 2>&1
same=$("$PY" - "$TMP/full.h5" "$D/results/runs/long-4242-start1.h5" <<'PY' 2>&1
import sys, h5py, numpy as np
full = h5py.File(sys.argv[1], "r")["training/loss"][()]
resumed = h5py.File(sys.argv[2], "r")["training/loss"][()]
k = resumed.shape[1]
print("same" if k == 4 and np.array_equal(full[:, -k:], resumed) else f"differ: {full[:, -k:]} vs {resumed}")
PY
)
if [ "$same" = same ]; then ok "A: steps 5..8 of the requeued start are bit-identical to an uninterrupted run's"
else bad "A: requeued losses vs uninterrupted: $same"; fi

# B. the time limit's SIGUSR1, with VITDDP and CKPT from the environment
# (a run far longer than the test: the signal must come first on any machine)
CKPT_B="$D/mine/long-run.h5"
: > "$TMP/scontrol.log"
start_bg B0 4343 0 VITDDP="$BIN" CKPT="$CKPT_B" CKPT_EVERY=50 VITDDP_ARGS="$ARGS --steps 10000000"
for _ in $(seq 600); do [ -f "$CKPT_B" ] && break; sleep 0.05; done
# The batch shell is the `bash` child of the subshell: signal it as Slurm's B: does.
SHELL_PID=$(pgrep -P $PID -x bash || pgrep -P "$(pgrep -P $PID -x timeout)" -x bash)
kill -USR1 "$SHELL_PID" 2>/dev/null
wait $PID
rc=$?
res_b="$D/results/runs/long-4343-start0.h5"
stop_b=$(h5 "$res_b" 'f.attrs["stop_reason"]')
n_b=$(h5 "$res_b" 'int(f.attrs["steps_completed"])')
if [ $rc -eq 0 ] && grep -q "time limit near" "$TMP/B0.log" && grep -qx "requeue 4343" "$TMP/scontrol.log" &&
   [ "$stop_b" = "signal 15 after step $((n_b - 1))" ] && [ "$(ckpt_step "$CKPT_B")" = "$n_b" ]; then
  ok "B: SIGUSR1 -> vitddp stops after step $((n_b - 1)) (0-based; $n_b steps done) with its checkpoint, scontrol requeue 4343, exit 0"
else bad "B: rc=$rc, stop_reason '$stop_b', steps '$n_b', checkpoint '$(ckpt_step "$CKPT_B")', scontrol: $(cat "$TMP/scontrol.log"): $(tail -5 "$TMP/B0.log")"; fi

# C. a new job given CKPT= continues that run (to 10 steps past the checkpoint)
TOTAL_C=$((${n_b:-0} + 10))
start C0 5555 0 VITDDP="$BIN" CKPT="$CKPT_B" CKPT_EVERY=50 VITDDP_ARGS="$ARGS --steps $TOTAL_C"
rc=$?
res_c="$D/results/runs/long-5555-start0.h5"
if [ $rc -eq 0 ] && grep -q "resuming from $CKPT_B" "$TMP/C0.log" &&
   [ "$(h5 "$res_c" 'f.attrs["resumed_from_step"]')" = "$n_b" ] &&
   [ "$(h5 "$res_c" 'f.attrs["stop_reason"]')" = completed ] && [ "$(ckpt_step "$CKPT_B")" = "$TOTAL_C" ]; then
  ok "C: job 5555 with CKPT=$(basename "$CKPT_B") resumes at step $n_b and completes its $TOTAL_C steps"
else bad "C: rc=$rc: $(tail -5 "$TMP/C0.log")"; fi
finish
