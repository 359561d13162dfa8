#!/bin/bash
# Session 38 call C: where FP8 decode steps of 1-4 tokens should leave the W8A16 GEMV for W8A8
# (--fp8-gemv-max-rows, new); quant_test's persistent GEMV tests on the committed kernels.
cd /tmp && tar -xJf "$OLDPWD/.gpu/c.tar.xz" -C /tmp
R=/tmp/call-C; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt; tar -cJf $OUT/r.tar.xz -C /tmp call-C; }
nvidia-smi --query-gpu=name,power.limit,driver_version,clocks.max.sm --format=csv > $R/gpu.txt
timeout 100 /tmp/c/run quant_test --gtest_filter='*Persistent*' > $R/quant_test-persistent.txt 2>&1; echo "quant_test rc $?"; grep -E "persistent GEMV|PASSED|FAILED" $R/quant_test-persistent.txt | head
timeout 100 /tmp/c/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
lat() {  # name extra...
  local n=$1; shift
  timeout 90 /tmp/c/run kiln bench latency /tmp/l8 -q fp8 --input-len 128 --output-len 128 --iterations 3 --warmup 1 "$@" --json $R/lat-$n.json > $R/lat-$n.txt 2>&1
  echo "lat $n rc $? $(python3 -c "import json;print(json.load(open('$R/lat-$n.json'))['decode_step_ms']['mean'])" 2>/dev/null)"
}
for r in 1 2; do
  lat b2-rows3-$r --batch-size 2; lat b2-rows1-$r --batch-size 2 --fp8-gemv-max-rows 1
done
lat b1-rows3 --batch-size 1; lat b1-rows0 --batch-size 1 --fp8-gemv-max-rows 0
lat b3-rows3 --batch-size 3; lat b3-rows2 --batch-size 3 --fp8-gemv-max-rows 2; lat b4 --batch-size 4
save
lat b2-kv8-rows3 --batch-size 2 --kv-cache-dtype fp8; lat b2-kv8-rows1 --batch-size 2 --kv-cache-dtype fp8 --fp8-gemv-max-rows 1
lat b3-nograph-rows3 --batch-size 3 --no-cuda-graphs; lat b3-nograph-rows2 --batch-size 3 --no-cuda-graphs --fp8-gemv-max-rows 2
lat b2-nograph-rows3 --batch-size 2 --no-cuda-graphs; lat b2-nograph-rows1 --batch-size 2 --no-cuda-graphs --fp8-gemv-max-rows 1
save
