#!/bin/bash
# Session 36 call B: the committed persistent W8A16 GEMV (4 blocks an SM) on an H200. Kernel
# cuda_engine_test (the engine's tokens and logprobs with the GEMVs' variants); greedy tokens with
# and without it; batch-1 decode of the synthetic Llama-3.1-8B in FP8 with and without it,
# alternating, three rounds, bf16 and fp8 KV.
cd /tmp && tar -xJf "$OLDPWD/.gpu/b.tar.xz" -C /tmp
R=/tmp/call-B; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt; tar -cJf $OUT/r.tar.xz -C /tmp call-B; }
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,clocks.max.mem,driver_version,memory.total --format=csv > $R/gpu.txt; cat $R/gpu.txt
timeout 100 /tmp/b/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
L="--batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1"
for round in 1 2 3; do
  for v in "pers:" "nopers:--no-gemv-persistent" "kv8-pers:--kv-cache-dtype fp8" "kv8-nopers:--kv-cache-dtype fp8 --no-gemv-persistent"; do
    n=${v%%:*}-r$round; a=${v#*:}
    timeout 90 /tmp/b/run kiln bench latency /tmp/l8 -q fp8 $a $L --json $R/lat-$n.json > $R/lat-$n.txt 2>&1; echo "lat $n rc $?"; grep "decode step" $R/lat-$n.txt
  done
  save
done
for v in "pers:" "nopers:--no-gemv-persistent"; do  # the same bits: the same greedy tokens
  timeout 60 /tmp/b/run kiln generate /tmp/l8 -q fp8 ${v#*:} --prompt "The quick brown fox" --max-tokens 32 --output jsonl 2>/dev/null > $R/gen-${v%%:*}.txt; echo "gen ${v%%:*} rc $?"
done
cmp $R/gen-pers.txt $R/gen-nopers.txt && echo "generate: the same output" && head -c 300 $R/gen-pers.txt; echo
timeout 150 /tmp/b/run quant_test > $R/quant_test.txt 2>&1; echo "quant_test rc $?"; grep -E "PASSED|FAILED|Persistent" $R/quant_test.txt | head
save
timeout 240 /tmp/b/run cuda_engine_test > $R/engine_test.txt 2>&1; echo "engine test rc $?"; grep -E "PASSED|FAILED|tests ran" $R/engine_test.txt | head
save
timeout 150 compute-sanitizer --tool memcheck /tmp/b/bin/quant_test --gtest_filter='*Persistent*' > $R/memcheck.txt 2>&1; echo "memcheck rc $?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck.txt | head -4
save
