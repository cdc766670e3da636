W=/tmp/s4c; rm -rf $W; mkdir -p $W
OUT=$W timeout 500 bash results/commands/ce_diagnostics.sh > $W/stdout.txt 2>&1
grep -E "^\||^#|rror" $W/stdout.txt
tar czf $OUT/s4c.tgz -C /tmp s4c
