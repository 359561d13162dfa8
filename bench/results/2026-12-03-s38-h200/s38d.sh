#!/bin/bash
# Session 38 call D: the committed build, with fp8_gemv_max_rows chosen by the peak DRAM
# bandwidth (1 on the H200). Decode steps at batch 1 and 2 (the old default's are call C's);
# cuda_engine_test.
cd /tmp && tar -xJf "$OLDPWD/.gpu/d.tar.xz" -C /tmp
R=/tmp/call-D; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt; tar -cJf $OUT/r.tar.xz -C /tmp call-D; }
nvidia-smi --query-gpu=name,power.limit,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.txt
timeout 100 /tmp/d/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
lat() {  # name extra...
  local n=$1; shift
  timeout 90 /tmp/d/run kiln bench latency /tmp/l8 -q fp8 --input-len 128 --output-len 128 --iterations 3 --warmup 1 "$@" --json $R/lat-$n.json > $R/lat-$n.txt 2>&1
  echo "lat $n rc $? $(python3 -c "import json;print(json.load(open('$R/lat-$n.json'))['decode_step_ms']['mean'])" 2>/dev/null)"
}
lat b2-default --batch-size 2; grep "FP8 decode" $R/lat-b2-default.txt
lat b1-default --batch-size 1
save
timeout 240 /tmp/d/run cuda_engine_test > $R/cuda_engine_test.txt 2>&1; echo "cuda_engine_test rc $?"; grep -E "PASSED|FAILED" $R/cuda_engine_test.txt | head
save
