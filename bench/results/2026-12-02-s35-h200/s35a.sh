#!/bin/bash
# Session 35 call A: the W8A16 GEMV epilogues (SiluMul in gate_up's, RoPE + KV write in qkv's) on
# an H200: kernel tests (quant_test, elementwise_test, memcheck of the GEMV tests), the engine
# tests that compare them with the separate kernels (GemvEpiloguesGiveTheSameBits,
# FusedDecodeMatchesKernelPerOp), and batch-1 decode of the synthetic Llama-3.1-8B in FP8 with
# both epilogues, each alone and neither (bf16 and fp8 KV), alternating, two rounds.
cd /tmp && tar -xJf "$OLDPWD/.gpu/a.tar.xz" -C /tmp
R=/tmp/call-A; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt; tar -cJf $OUT/r.tar.xz -C /tmp call-A; }
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,clocks.max.mem,driver_version,memory.total --format=csv > $R/gpu.txt; cat $R/gpu.txt
timeout 120 /tmp/a/run quant_test > $R/quant_test.txt 2>&1; echo "quant_test rc $?"; grep -E "PASSED|FAILED" $R/quant_test.txt | head
timeout 120 /tmp/a/run elementwise_test > $R/elementwise_test.txt 2>&1; echo "elementwise_test rc $?"; grep -E "PASSED|FAILED" $R/elementwise_test.txt | head
timeout 120 compute-sanitizer --tool memcheck /tmp/a/bin/quant_test --gtest_filter='GemvFp8Gpu*' > $R/memcheck.txt 2>&1; echo "memcheck rc $?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck.txt | head -4
save
timeout 200 /tmp/a/run cuda_engine_test --gtest_filter='*GemvEpilogues*:*FusedDecode*' > $R/engine_test.txt 2>&1; echo "engine test rc $?"
grep -E "PASSED|FAILED|fused vs|OK \]" $R/engine_test.txt | head -20
save
timeout 100 /tmp/a/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
L="--batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1"
for round in 1 2; do
  for v in "both:" "nosilu:--no-gemv-silu" "norope:--no-gemv-rope" "neither:--no-gemv-silu --no-gemv-rope" "kv8-both:--kv-cache-dtype fp8" "kv8-neither:--kv-cache-dtype fp8 --no-gemv-silu --no-gemv-rope"; do
    n=${v%%:*}-r$round; a=${v#*:}
    timeout 90 /tmp/a/run kiln bench latency /tmp/l8 -q fp8 $a $L --json $R/lat-$n.json > $R/lat-$n.txt 2>&1; echo "lat $n rc $?"; grep "decode step" $R/lat-$n.txt
  done
  save
done
