#!/bin/bash
# Session 32 call C: tests (cuda_engine_test incl. FusedDecodeMatchesKernelPerOp, quant_test,
# elementwise_test, fp8_gate_up_test), decode_fused_bench, batch-1 latency with and without
# --fused-decode on the synthetic 8B (FP8 weights; bf16 and fp8 KV).
cd /tmp && tar -xJf "$OLDPWD/.gpu/c.tar.xz" -C /tmp
R=$OUT/call-C; mkdir -p $R
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,driver_version --format=csv > $R/gpu.txt
for t in quant_test elementwise_test fp8_gate_up_test cuda_engine_test; do
  timeout 240 /tmp/c/run $t > $R/$t.txt 2>&1; echo "$t rc $?" | tee -a $R/tests.txt; grep -E "PASSED|FAILED|SKIPPED" $R/$t.txt | head -3
done
grep -E "fused vs" $R/cuda_engine_test.txt
for c in 256 2048; do
  timeout 60 /tmp/c/run decode_fused_bench --context $c --json $R/bench-$c.json > $R/bench-$c.txt 2>&1; echo "bench $c rc $?"; head -8 $R/bench-$c.txt
done
timeout 200 /tmp/c/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
L="--batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1"
for v in "u:" "f:--fused-decode" "u8:--kv-cache-dtype fp8" "f8:--kv-cache-dtype fp8 --fused-decode"; do
  n=${v%%:*}; a=${v#*:}
  timeout 100 /tmp/c/run kiln bench latency /tmp/l8 -q fp8 $L $a --json $R/lat-$n.json > $R/lat-$n.txt 2>&1; echo "lat $n rc $?"; grep "decode step" $R/lat-$n.txt
done
cd $OUT && tar -cJf r.tar.xz call-C && rm -rf call-C
