#!/bin/bash
# Session 37 call D: the W8A8 GEMV (kernels::GemvE4m3, e4m3 mma.sync). quant_test (its new
# tests), gemv_bench --fp8 with the W8A8 column through GemvE4m3 (KILN_E4M3_GEMV_MAX_ROWS=8)
# and through cuBLASLt (=0), gemv_bench --chain (its new w8a8 variant), and the decode step with
# the batch-1 layers on W8A16 (default) or W8A8 (KILN_FP8_GEMV_MAX_ROWS=0); cuda_engine_test.
cd /tmp && tar -xJf "$OLDPWD/.gpu/d.tar.xz" -C /tmp
R=/tmp/call-D; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt; tar -cJf $OUT/r.tar.xz -C /tmp call-D; }
nvidia-smi --query-gpu=name,power.limit,driver_version --format=csv > $R/gpu.txt
timeout 150 /tmp/d/run quant_test > $R/quant_test.txt 2>&1; echo "quant_test rc $?"; grep -E "PASSED|FAILED|E4m3" $R/quant_test.txt | head -12
timeout 60 /tmp/d/run gemv_bench --chain > $R/chain.txt 2>&1; echo "chain rc $?"; cat $R/chain.txt | head -12
for e in 8 0; do
  KILN_E4M3_GEMV_MAX_ROWS=$e timeout 100 /tmp/d/run gemv_bench --fp8 --rows 1,2,4,8 > $R/fp8-e$e.txt 2>&1; echo "fp8 e$e rc $?"; grep -E "^(qkv|o|gate_up|down) " $R/fp8-e$e.txt
done
save
timeout 100 /tmp/d/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
L="--input-len 128 --output-len 128 --iterations 3 --warmup 1"
lat() {  # name fp8-gemv-rows e4m3-rows args
  KILN_FP8_GEMV_MAX_ROWS=$2 KILN_E4M3_GEMV_MAX_ROWS=$3 timeout 90 /tmp/d/run kiln bench latency /tmp/l8 -q fp8 $L $4 --json $R/lat-$1.json > $R/lat-$1.txt 2>&1
  echo "lat $1 rc $? $(python3 -c "import json;print(json.load(open('$R/lat-$1.json'))['decode_step_ms']['mean'])" 2>/dev/null)"
}
lat b1-w8a16 3 8 "--batch-size 1"; lat b1-a8 0 8 "--batch-size 1"; lat b1-w8a16-r2 3 8 "--batch-size 1"; lat b1-a8-r2 0 8 "--batch-size 1"
lat b1-a8-kv8 0 8 "--batch-size 1 --kv-cache-dtype fp8"
lat b2-w8a16 3 8 "--batch-size 2"; lat b2-a8 0 8 "--batch-size 2"
lat b4-e8 3 8 "--batch-size 4"; lat b4-e0 3 0 "--batch-size 4"
lat b8-e8 3 8 "--batch-size 8"; lat b8-e0 3 0 "--batch-size 8"
save
timeout 240 /tmp/d/run cuda_engine_test > $R/engine_test.txt 2>&1; echo "engine test rc $?"; grep -E "PASSED|FAILED" $R/engine_test.txt | head
save
