#!/usr/bin/env bash
# Session 4, last run (2 x H200, build cb598b9+): every 2-GPU copy-engine cell of the issue's
# target (fp32/tf32/bf16, compression none and bf16) with the 1-GPU --no-ddp figure of each
# precision, in one job (sweep_sm_carveout.sh). Output tarred into $OUT.
set -u -o pipefail
W=/tmp/s4i; rm -rf $W; mkdir -p $W
SPECS="bf16:none:1:0:0 bf16:none:2:0:0:--allreduce,copy-engine bf16:bf16:2:0:0:--allreduce,copy-engine
tf32:none:1:0:0 tf32:none:2:0:0:--allreduce,copy-engine tf32:bf16:2:0:0:--allreduce,copy-engine
fp32:none:1:0:0 fp32:none:2:0:0:--allreduce,copy-engine fp32:bf16:2:0:0:--allreduce,copy-engine" \
  OUT=$W timeout 200 bash results/commands/sweep_sm_carveout.sh > $W/stdout.txt 2>&1
grep -E "^\||rror" $W/stdout.txt
tar czf $OUT/s4i.tgz -C /tmp s4i
