#!/usr/bin/env bash
# Session 2, second device batch (2 x H200): checkpoint/resume on 2 GPUs, the reliability cases of
# issue 7 on 2 GPUs, and Fashion-MNIST recipes with the LR schedule / AdamW. Binaries and the
# Fashion-MNIST files in carry/ (carry/fmnist). Results tarred to $OUT/B.tgz.
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
B=/tmp/B; mkdir -p $B/resume $B/rel $B/fmnist
FMNIST=carry/fmnist OUT=$B/resume timeout 230 bash results/commands/device_resume.sh > $B/resume/stdout.txt 2>&1
OUT=$B/rel timeout 200 bash results/commands/device_reliability2.sh > $B/rel/stdout.txt 2>&1
MPI="mpirun --bind-to none -x NCCL_NVLS_ENABLE=0 -np 2"
COMMON="--model vit_fmnist --data idx:carry/fmnist --batch-size 128 --warmup-steps 0 --cooldown-steps 0 --eval-split test --progress-every 1000 --flush-every 234 --lr-schedule cosine"
timeout 60 $MPI carry/vitddp $COMMON --steps 9360 --eval-every 936 --lr 0.03 --momentum 0.9 --lr-warmup-steps 234 --out $B/fmnist/sgd-40ep.h5 > $B/fmnist/sgd-40ep.log 2>&1
timeout 50 $MPI carry/vitddp $COMMON --steps 7020 --eval-every 702 --optimizer adamw --lr 1e-3 --weight-decay 0.05 --lr-warmup-steps 468 --out $B/fmnist/adamw-30ep.h5 > $B/fmnist/adamw-30ep.log 2>&1
tar czf $OUT/B.tgz -C $B .
grep -E "^PASS|^FAIL|skip" $B/resume/stdout.txt; tail -4 $B/resume/stdout.txt
tail -45 $B/rel/stdout.txt
for f in $B/fmnist/*.log; do echo "== $f"; grep -E "eval after|error" $f | tail -4; done
