#!/bin/bash
# Session 32 calls B1-B3: decode_fused_bench (variants and CTA 0's phase trace), one bundle of the
# kernel's revision each (README).
cd /tmp && tar -xJf "$OLDPWD/.gpu/b.tar.xz" -C /tmp
R=$OUT/call-B; mkdir -p $R
for c in 256 2048; do
timeout 120 /tmp/b/run decode_fused_bench --context $c --json $R/bench-$c.json 2>&1 | tee $R/bench-$c.txt
done
cd $OUT && tar -cJf r.tar.xz call-B && rm -rf call-B
