#!/bin/bash
# Session 33 call C: decode_fused_bench (tensor-core dot vs FFMA dot, with the stage waits and
# the copies taken out in turn; CTA 0's phases for each) at contexts 256 and 2048.
cd /tmp && tar -xJf "$OLDPWD/.gpu/c.tar.xz" -C /tmp
R=$OUT/call-C; mkdir -p $R
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,driver_version --format=csv > $R/gpu.txt
for c in 256 2048; do
  timeout 90 /tmp/c/run decode_fused_bench --context $c --json $R/bench-$c.json > $R/bench-$c.txt 2>&1; echo "bench $c rc $?"; cat $R/bench-$c.txt
done
cd $OUT && tar -cJf r.tar.xz call-C && rm -rf call-C
