#!/bin/bash
# Session 33 call F (the committed code): FusedDecode v2 (K/V through the ring, per-lane row
# parameters, hoisted norm weights, one-trip split merge, 12 stages, no register spills at
# group <= 4): the engine test, decode_fused_bench at contexts 256 and 2048 (with the SM clock and
# the consumers-alone variants), batch-1 latency with and without --fused-decode on the synthetic
# 8B (FP8 weights; bf16 and fp8 KV).
cd /tmp && tar -xJf "$OLDPWD/.gpu/a.tar.xz" -C /tmp
R=$OUT/call-F; mkdir -p $R
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,driver_version --format=csv > $R/gpu.txt
for c in 256 2048; do
  timeout 60 /tmp/a/run decode_fused_bench --context $c --json $R/bench-$c.json > $R/bench-$c.txt 2>&1; echo "bench $c rc $?"; cat $R/bench-$c.txt
done
timeout 240 /tmp/a/run cuda_engine_test --gtest_filter='*FusedDecode*' > $R/fused_test.txt 2>&1; echo "fused test rc $?"
grep -E "PASSED|FAILED|fused vs|Failure|Expected" $R/fused_test.txt | head -30
timeout 200 /tmp/a/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
L="--batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1"
for v in "u:" "f:--fused-decode" "u8:--kv-cache-dtype fp8" "f8:--kv-cache-dtype fp8 --fused-decode"; do
  n=${v%%:*}; a=${v#*:}
  timeout 100 /tmp/a/run kiln bench latency /tmp/l8 -q fp8 $L $a --json $R/lat-$n.json > $R/lat-$n.txt 2>&1; echo "lat $n rc $?"; grep "decode step" $R/lat-$n.txt
done
sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt
cd $OUT && tar -cJf r.tar.xz call-F && rm -rf call-F
