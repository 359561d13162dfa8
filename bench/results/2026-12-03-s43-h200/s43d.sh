#!/bin/bash
# Session 43 call D (H200): the final build (the epilogues, the review mends, down's streamed GEMV
# in its wide form by default): the W4A16 tests, then the batch-1 steps of the synthetic 8B
# against kiln_head (b79b37f's W4A16 kernels, SiluMul and runner relinked), alternated.
cd /tmp && tar -xJf "$OLDPWD/.gpu/d.tar.xz" -C /tmp
R=/tmp/call-D; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt 2>/dev/null; tar -cJf $OUT/r.tar.xz -C /tmp call-D; }
nvidia-smi --query-gpu=name,power.limit,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.txt
t() { local n=$1; shift; timeout 200 /tmp/d/run "$@" > $R/test-$n.txt 2>&1; echo "test $n rc $? $(grep -E '^\[  (PASSED|FAILED)' $R/test-$n.txt | tr '\n' ' ')"; }
t lowbit gemm_lowbit_test --gtest_filter='GemmW4Gpu*'
t upload weight_upload_test
t elementwise elementwise_test --gtest_filter='*SiluMul*'
t engine cuda_engine_test --gtest_filter='CudaEngine.W4NormInGemvGivesTheSameBits'
save
timeout 60 /tmp/d/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
timeout 170 /tmp/d/run kiln build /tmp/l8 --out /tmp/w4 --quant w4a16-rtn --quantize-lm-head > $R/build-w4.txt 2>&1; echo "build rc $?"
lat() {  # name binary model flags...
  local n=$1 b=$2 m=$3; shift 3
  timeout 60 /tmp/d/run $b bench latency $m --batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1 "$@" --json $R/lat-$n.json > $R/lat-$n.txt 2>&1
  echo "lat $n rc $? $(python3 -c "import json;d=json.load(open('$R/lat-$n.json'))['decode_step_ms'];print(d['mean'])" 2>/dev/null)"
}
for round in 1 2; do
  lat w4-head-$round kiln_head /tmp/w4
  lat w4-new-$round kiln /tmp/w4
done
save
lat bf16-new kiln /tmp/l8
lat fp8-new kiln /tmp/l8 -q fp8
save
