#!/bin/bash
# Session 32 call D (committed code e18aad6): fp8_gate_up_test, the FusedDecode engine test,
# decode_fused_bench at contexts 256 and 2048 (variants and CTA 0's phase trace).
cd /tmp && tar -xJf "$OLDPWD/.gpu/d.tar.xz" -C /tmp
R=$OUT/call-D; mkdir -p $R
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,driver_version --format=csv > $R/gpu.txt
timeout 100 /tmp/d/run fp8_gate_up_test > $R/fp8_gate_up_test.txt 2>&1; echo "fp8_gate_up_test rc $?"
timeout 200 /tmp/d/run cuda_engine_test --gtest_filter='*FusedDecode*' > $R/fused_test.txt 2>&1; echo "fused test rc $?"
grep -E "PASSED|FAILED|fused vs" $R/fp8_gate_up_test.txt $R/fused_test.txt
for c in 256 2048; do
  timeout 60 /tmp/d/run decode_fused_bench --context $c --json $R/bench-$c.json > $R/bench-$c.txt 2>&1; echo "bench $c rc $?"; cat $R/bench-$c.txt
done
cd $OUT && tar -cJf r.tar.xz call-D && rm -rf call-D
