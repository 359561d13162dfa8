#!/bin/bash
# Session 36 call D: the persistent W8A16 GEMV at one row only (the committed code). quant_test,
# cuda_engine_test, gemv_bench --fp8 at 1-3 rows (persistent at 1 only), and one alternating
# round of the FP8 batch-1 decode step with and without it.
cd /tmp && tar -xJf "$OLDPWD/.gpu/d.tar.xz" -C /tmp
R=/tmp/call-D; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt; tar -cJf $OUT/r.tar.xz -C /tmp call-D; }
nvidia-smi --query-gpu=name,power.limit,driver_version --format=csv > $R/gpu.txt
timeout 150 /tmp/d/run quant_test > $R/quant_test.txt 2>&1; echo "quant_test rc $?"; grep -E "PASSED|FAILED|Persistent" $R/quant_test.txt | head
timeout 100 /tmp/d/run gemv_bench --fp8 --rows 1,2,3 > $R/fp8-rows123.txt 2>&1; echo "gemv_bench rc $?"; grep -E "^(qkv|o|gate_up|down) +[123] |layer" $R/fp8-rows123.txt
save
timeout 240 /tmp/d/run cuda_engine_test > $R/engine_test.txt 2>&1; echo "engine test rc $?"; grep -E "PASSED|FAILED" $R/engine_test.txt | head
save
timeout 100 /tmp/d/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
L="--input-len 128 --output-len 128 --iterations 3 --warmup 1"
for v in "pers:--batch-size 1" "nopers:--batch-size 1 --no-gemv-persistent" "b2-pers:--batch-size 2" "b2-nopers:--batch-size 2 --no-gemv-persistent"; do
  n=${v%%:*}; a=${v#*:}
  timeout 90 /tmp/d/run kiln bench latency /tmp/l8 -q fp8 $L $a --json $R/lat-$n.json > $R/lat-$n.txt 2>&1; echo "lat $n rc $?"; grep "decode step" $R/lat-$n.txt
done
save
