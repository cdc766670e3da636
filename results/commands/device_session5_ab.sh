#!/usr/bin/env bash
# Issue "[4 of 8] Speed", session 5: the attention clean-up's speed, three builds alternating on 1 H200
# (carry/ab.tar.xz): vitddp_before (f24373f's tree without its attention changes), vitddp_split
# (f24373f: dQ and dK of the small backward kernel in two loops) and vitddp_fused (this commit:
# one loop, tile_fma2); plus gpu_tests "[attention]" of this commit. vitddp ViT-L/32 batch 32,
# --no-ddp, data on the GPU, 10 warm-up + 20 timed steps, --attention custom. Output tarred into $OUT.
set -u -o pipefail
W=/tmp/s5ab; rm -rf $W; mkdir -p $W
tar xJf carry/ab.tar.xz -C carry
{
  echo "== gpu_tests [attention] (this commit)"
  timeout 120 carry/gpu_tests "[attention]" > $W/gpu_tests_attention.log 2>&1
  echo "exit $?"; tail -2 $W/gpu_tests_attention.log
  COMMON="--no-ddp --attention custom --data device --warmup-steps 10 --steps 20 --cooldown-steps 0 --progress-every 100 --overwrite"
  for rep in 1 2 3; do
    for p in tf32 fp32; do
      for b in before split fused; do
        timeout 90 carry/vitddp_$b --precision $p $COMMON --out $W/$p-$b-r$rep.h5 2>&1 |
          grep -E "timed window|rror" | sed "s/^/$p $b repeat $rep: /"
      done
    done
  done
} 2>&1 | tee $W/log.txt
tar czf $OUT/s5ab.tgz -C /tmp s5ab
