#!/bin/bash
# Session 37 call F: GemvE4m3 at 2 steps in flight and 4 blocks an SM (the u2b4 of call E) in the
# engine: the FP8 decode step at 4 and 8 tokens, where the layers take the W8A8 path, with the
# GEMV (KILN_E4M3_GEMV_MAX_ROWS=8, default of this build) and with cuBLASLt (=0), alternating;
# quant_test, cuda_engine_test.
cd /tmp && tar -xJf "$OLDPWD/.gpu/f.tar.xz" -C /tmp
R=/tmp/call-F; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt; tar -cJf $OUT/r.tar.xz -C /tmp call-F; }
timeout 100 /tmp/f/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
L="--input-len 128 --output-len 128 --iterations 3 --warmup 1"
lat() {  # name e4m3-rows args
  KILN_E4M3_GEMV_MAX_ROWS=$2 timeout 90 /tmp/f/run kiln bench latency /tmp/l8 -q fp8 $L $3 --json $R/lat-$1.json > $R/lat-$1.txt 2>&1
  echo "lat $1 rc $? $(python3 -c "import json;print(json.load(open('$R/lat-$1.json'))['decode_step_ms']['mean'])" 2>/dev/null)"
}
lat b4-e8 8 "--batch-size 4"; lat b4-e0 0 "--batch-size 4"; lat b8-e8 8 "--batch-size 8"; lat b8-e0 0 "--batch-size 8"
lat b4-e8-r2 8 "--batch-size 4"; lat b4-e0-r2 0 "--batch-size 4"; lat b8-e8-r2 8 "--batch-size 8"; lat b8-e0-r2 0 "--batch-size 8"
lat b8-e8-kv8 8 "--batch-size 8 --kv-cache-dtype fp8"; lat b8-e0-kv8 0 "--batch-size 8 --kv-cache-dtype fp8"
lat b1 8 "--batch-size 1"
save
timeout 150 /tmp/f/run quant_test > $R/quant_test.txt 2>&1; echo "quant_test rc $?"; grep -E "PASSED|FAILED" $R/quant_test.txt | head
timeout 240 /tmp/f/run cuda_engine_test > $R/engine_test.txt 2>&1; echo "engine test rc $?"; grep -E "PASSED|FAILED" $R/engine_test.txt | head
save
