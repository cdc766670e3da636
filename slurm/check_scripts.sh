#!/usr/bin/env bash
# Static checks of the Slurm scripts (no Slurm needed), run by ctest (label cli):
#   - `bash -n` on every script in slurm/;
#   - #SBATCH options: all before the first command (sbatch ignores later ones), --job-name,
#     --output, --time, --nodes, --ntasks-per-node, --gpus-per-node, --cpus-per-task present,
#     ntasks-per-node == gpus-per-node (one rank per GPU); a job array writes per-task logs (%a);
#   - the job body: NCCL_NVLS_ENABLE=0 exported, srun with --mpi=pmix, cores handed to srun
#     (SRUN_CPUS_PER_TASK or srun --cpus-per-task), --data-workers passed to vitddp;
#   - every script finds the binary with the same block (so it can be submitted from any directory:
#     $VITDDP, the submit directory's build/vitddp, the repository's found through $VITDDP_REPO, the
#     script's folder, scontrol's path of the job script or the submit directory) and starts "$VITDDP";
#   - every vitddp option used (also in commented alternatives) exists in `vitddp --help`;
#   - sweep.sbatch: the --array range covers exactly the CONFIGS table, results named
#     results/runs/sweep-${SLURM_ARRAY_JOB_ID}-${SLURM_ARRAY_TASK_ID}.h5 (via TASK);
#   - multinode.sbatch: more than one node, and the mpirun-inside-the-allocation alternative;
#   - long.sbatch: --requeue, --signal=B:USR1@<seconds> with a USR1 trap that stops srun and runs
#     scontrol requeue, checkpoints written to $CKPT (settable), --resume only when it exists
#     (the requeue itself runs in tests/slurm_requeue_test.sh).
# Usage: check_scripts.sh [vitddp binary]   (without it, the option check is skipped)
set -u
DIR=$(cd "$(dirname "$0")" && pwd)
BIN=${1:-}
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok   - $1"; }
bad() { fail=$((fail + 1)); echo "FAIL - $1"; }

HELP=""
if [ -n "$BIN" ]; then
  HELP=$("$BIN" --help 2>&1) || { bad "$BIN --help failed"; HELP=""; }
fi

# sbatch_value FILE OPTION: the value of "#SBATCH --OPTION=VALUE" (or "--OPTION VALUE"), "" if absent.
sbatch_value() {
  sed -n -E "s/^#SBATCH[[:space:]]+--$2(=|[[:space:]]+)([^[:space:]]+).*/\2/p" "$1" | tail -1
}

# vitddp_options FILE: every --option on the vitddp command lines ("$VITDDP" or .../vitddp;
# continuations joined, comment markers of commented-out alternatives removed), one per line.
vitddp_options() {
  sed -E 's/^#[[:space:]]?//' "$1" | grep -v '^SBATCH' | awk '
    { line = $0 }
    cont { buf = buf " " line } !cont { buf = line }
    { cont = (line ~ /\\$/); if (cont) next; print buf; buf = "" }' |
    grep -E '((^|[[:space:]/])vitddp|"\$VITDDP")[[:space:]]' |
    sed -E 's/.*(vitddp|"\$VITDDP")[[:space:]]//' | grep -oE '(^|[[:space:]])--[a-z][a-z0-9-]*' | tr -d ' ' | sort -u
}

# repo_block FILE: the script's submit-directory-and-binary block (identical in every script);
# outside_block FILE: the rest of the script.
repo_block() { sed -n '/^# --- submit directory and binary/,/^# --- end of the submit directory and binary block/p' "$1"; }
outside_block() { sed '/^# --- submit directory and binary/,/^# --- end of the submit directory and binary block/d' "$1"; }

for f in "$DIR"/*.sbatch "$DIR"/*.sh; do
  [ -e "$f" ] || continue
  name=$(basename "$f")
  if err=$(bash -n "$f" 2>&1); then ok "$name: bash -n"; else bad "$name: bash -n: $err"; fi
done

for f in "$DIR"/*.sbatch; do
  [ -e "$f" ] || continue
  name=$(basename "$f")
  # #SBATCH lines after the first command are silently ignored by sbatch.
  first_cmd=$(grep -nvE '^[[:space:]]*(#|$)' "$f" | head -1 | cut -d: -f1)
  last_sbatch=$(grep -n '^#SBATCH' "$f" | tail -1 | cut -d: -f1)
  if [ -n "$last_sbatch" ] && { [ -z "$first_cmd" ] || [ "$last_sbatch" -lt "$first_cmd" ]; }; then
    ok "$name: all #SBATCH lines before the first command"
  else
    bad "$name: #SBATCH on line ${last_sbatch:-none} after the first command (line $first_cmd): sbatch ignores it"
  fi
  missing=""
  for o in job-name output time nodes ntasks-per-node gpus-per-node cpus-per-task; do
    [ -n "$(sbatch_value "$f" $o)" ] || missing="$missing --$o"
  done
  if [ -z "$missing" ]; then ok "$name: #SBATCH job-name, output, time, nodes, ntasks-per-node, gpus-per-node, cpus-per-task"
  else bad "$name: #SBATCH missing:$missing"; fi
  tpn=$(sbatch_value "$f" ntasks-per-node)
  gpn=$(sbatch_value "$f" gpus-per-node)
  gpn=${gpn##*:}  # --gpus-per-node=h200:8 -> 8
  if [ -n "$tpn" ] && [ "$tpn" = "$gpn" ]; then ok "$name: ntasks-per-node ($tpn) == gpus-per-node ($gpn)"
  else bad "$name: ntasks-per-node '$tpn' != gpus-per-node '$gpn' (one rank per GPU)"; fi
  array=$(sbatch_value "$f" array)
  output=$(sbatch_value "$f" output)
  if [ -n "$array" ]; then
    if grep -q '%a' <<<"$output" && grep -q '%A' <<<"$output"; then ok "$name: array job logs per task ($output)"
    else bad "$name: --array without %A and %a in --output ($output): tasks would share one log"; fi
  fi
  if grep -qE '^[[:space:]]*export[[:space:]]+NCCL_NVLS_ENABLE=0' "$f"; then ok "$name: exports NCCL_NVLS_ENABLE=0"
  else bad "$name: NCCL_NVLS_ENABLE=0 not exported"; fi
  srun_lines=$(grep -E '^[[:space:]]*srun[[:space:]]' "$f")
  if [ -n "$srun_lines" ] && ! grep -vq -- '--mpi=pmix' <<<"$srun_lines"; then ok "$name: srun --mpi=pmix"
  else bad "$name: every srun needs --mpi=pmix: ${srun_lines:-no srun}"; fi
  if grep -qE '^[[:space:]]*export[[:space:]]+SRUN_CPUS_PER_TASK=' "$f" || grep -q -- '--cpus-per-task=' <<<"$srun_lines"; then
    ok "$name: cores per task handed to srun"
  else bad "$name: neither SRUN_CPUS_PER_TASK exported nor srun --cpus-per-task"; fi
  opts=$(vitddp_options "$f")
  if grep -qx -- '--data-workers' <<<"$opts"; then ok "$name: passes --data-workers"
  else bad "$name: vitddp without --data-workers"; fi
  if [ -n "$HELP" ]; then
    unknown=""
    for o in $opts; do
      grep -qE -- "^[[:space:]]*$o([[:space:]]|$)" <<<"$HELP" || unknown="$unknown $o"
    done
    if [ -z "$unknown" ]; then ok "$name: vitddp options exist in --help: $(echo $opts)"
    else bad "$name: options not in vitddp --help:$unknown"; fi
  fi
  # Any directory: the shared block, then the job runs "$VITDDP" (no bare build/vitddp, no other cd).
  block=$(repo_block "$f")
  if [ -n "$block" ] && [ "$block" = "$(repo_block "$DIR/train.sbatch")" ] && grep -q 'find_repo' <<<"$block"; then
    ok "$name: finds the binary (submit directory, repository) with the shared block"
  else bad "$name: no submit-directory-and-binary block, or it differs from train.sbatch's"; fi
  if outside_block "$f" | grep -vE '^[[:space:]]*#' | grep -qE '(^|[[:space:]])(build/vitddp[[:space:]]|cd[[:space:]])'; then
    bad "$name: runs build/vitddp or changes directory outside the shared block"
  else ok "$name: the binary is \$VITDDP"; fi
done

# sweep.sbatch: array range == table, results named by array job id and task id.
S="$DIR/sweep.sbatch"
if [ -f "$S" ]; then
  n=$(awk '/^CONFIGS=\(/{on=1; next} on && /^\)/{on=0} on && /^[[:space:]]*"/{c++} END{print c+0}' "$S")
  range=$(sbatch_value "$S" array)
  range=${range%%%*}
  if [ "$range" = "0-$((n - 1))" ]; then ok "sweep.sbatch: --array=$range covers the $n CONFIGS entries"
  else bad "sweep.sbatch: --array=$range but CONFIGS has $n entries (want 0-$((n - 1)))"; fi
  if grep -q 'OUT="results/runs/sweep-${SLURM_ARRAY_JOB_ID:-local}-${TASK}.h5"' "$S" &&
     grep -q 'TASK="${SLURM_ARRAY_TASK_ID' "$S"; then
    ok "sweep.sbatch: results/runs/sweep-\${SLURM_ARRAY_JOB_ID}-\${SLURM_ARRAY_TASK_ID}.h5"
  else bad "sweep.sbatch: results file not named by array job id and task id"; fi
  bad_rows=$(awk '/^CONFIGS=\(/{on=1; next} on && /^\)/{on=0} on && /^[[:space:]]*"/{
      gsub(/"/, ""); if ($1 !~ /^[0-9.]+$/ || NF < 3) print}' "$S")
  if [ -z "$bad_rows" ]; then ok "sweep.sbatch: every CONFIGS entry is 'MiB compression precision'"
  else bad "sweep.sbatch: malformed CONFIGS entries: $bad_rows"; fi
fi

M="$DIR/multinode.sbatch"
if [ -f "$M" ]; then
  nodes=$(sbatch_value "$M" nodes)
  if [ "${nodes%%-*}" -gt 1 ] 2>/dev/null; then ok "multinode.sbatch: --nodes=$nodes"
  else bad "multinode.sbatch: --nodes=$nodes is not several nodes"; fi
  if grep -qE '^#[[:space:]]*mpirun[[:space:]]' "$M"; then ok "multinode.sbatch: commented mpirun alternative"
  else bad "multinode.sbatch: no commented mpirun alternative"; fi
fi

L="$DIR/long.sbatch"
if [ -f "$L" ]; then
  if grep -qE '^#SBATCH[[:space:]]+--requeue' "$L"; then ok "long.sbatch: --requeue"
  else bad "long.sbatch: no #SBATCH --requeue (a preempted job would not restart)"; fi
  sig=$(sbatch_value "$L" signal)
  if [[ "$sig" =~ ^B:USR1@[0-9]+$ ]] && grep -qE '^trap [a-z_]+ USR1$' "$L" &&
     grep -qE '^[[:space:]]*kill -TERM "\$SRUN_PID"' "$L" && grep -qE '^[[:space:]]*scontrol requeue "\$JOB"' "$L" &&
     grep -qE '[[:space:]]&$' "$L" && grep -qE 'wait "\$SRUN_PID"' "$L"; then
    ok "long.sbatch: --signal=$sig, a USR1 trap stops srun (SIGTERM: vitddp checkpoints) and requeues"
  else bad "long.sbatch: the time limit is not handled (--signal=B:USR1@N, trap ... USR1, srun in the background, kill -TERM, scontrol requeue)"; fi
  if grep -qE '^CKPT="\$\{CKPT:-' "$L"; then ok "long.sbatch: the checkpoint path is settable (CKPT=...)"
  else bad "long.sbatch: CKPT is not settable from the environment"; fi
  lopts=$(vitddp_options "$L")
  if grep -qx -- '--checkpoint-every' <<<"$lopts" && grep -qx -- '--checkpoint-path' <<<"$lopts"; then
    ok "long.sbatch: --checkpoint-every and --checkpoint-path"
  else bad "long.sbatch: vitddp without --checkpoint-every / --checkpoint-path"; fi
  if grep -qE 'if \[ -f "\$CKPT" \]' "$L" && grep -qE 'RESUME=\(--resume "\$CKPT"\)' "$L" &&
     grep -q -- '--checkpoint-path "$CKPT"' "$L"; then
    ok "long.sbatch: resumes from its own checkpoint path only when the file exists"
  else bad "long.sbatch: --resume not guarded by a test for the checkpoint it writes"; fi
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
