#!/usr/bin/env bash
# Issue "[4 of 8] Speed", session 8, job f (2 x H200), the build of this commit (the copy-engine
# reducer clears its non-finite slot on the compute stream): every GPU test, then 2-GPU bf16
# copy-engine runs with --debug-nan-at-step 12 --on-nonfinite skip on 1 and 2 comm streams (exactly
# one step skipped), and the bf16 speed on 1 and 2 comm streams. Into $OUT/$JOB.tgz.
#   carry/bins.tar.xz: vitddp, gpu_tests, gpu_mpi_tests (stripped).
set -u -o pipefail
JOB=${JOB:-s8f}
source results/commands/lib_ab.sh
{
  carry/vitddp --version
  ab_tests
  for k in 1 2; do
    for c in none bf16; do
      timeout 120 mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -np 2 carry/vitddp --precision bf16 --allreduce copy-engine \
        --comm-streams $k --compression $c --debug-nan-at-step 12 --on-nonfinite skip --data device --warmup-steps 5 \
        --steps 20 --cooldown-steps 0 --progress-every 1000 --overwrite --out "$W/nan-s$k-$c.h5" > "$W/nan-s$k-$c.log" 2>&1
      echo "nan-s$k-$c exit $?: nonfinite_steps $(h5dump -d /summary/nonfinite_steps "$W/nan-s$k-$c.h5" 2>/dev/null | grep -A1 DATA | tail -1)"
    done
  done
  ab bf16-1gpu 1 bf16 vitddp
  ab ce-s1 2 bf16 vitddp --allreduce copy-engine --comm-streams 1
  ab ce-auto 2 bf16 vitddp --allreduce copy-engine
} 2>&1 | tee "$W/log.txt"
ab_finish
