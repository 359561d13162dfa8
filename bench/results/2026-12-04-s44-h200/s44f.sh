#!/bin/bash
# Session 44 call F (H200): the committed build (FP8 one-row GEMV on the tensor cores where the
# row tiles fill 2.5 blocks an SM: qkv and gate_up of an 8B): kernel, GEMM and engine tests;
# batch-1 steps of the synthetic 8B in FP8 (twice), W4A16 and bf16.
cd /tmp && tar -xJf "$OLDPWD/.gpu/f.tar.xz" -C /tmp
R=/tmp/call-F; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt 2>/dev/null; tar -cJf $OUT/r.tar.xz -C /tmp call-F; }
nvidia-smi --query-gpu=name,power.limit,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.txt
t() { local n=$1; shift; timeout 150 /tmp/f/run "$@" > $R/test-$n.txt 2>&1; echo "test $n rc $? $(grep -E '^\[  (PASSED|FAILED)' $R/test-$n.txt | tr '\n' ' ')"; }
t quant quant_test --gtest_filter='GemvFp8Gpu*'
t gemm gemm_test --gtest_filter='*Fp8*'
t engine cuda_engine_test --gtest_filter='CudaEngine.Fp8GemvOnTheTensorCoresMatchesTheFmaGemv:CudaEngine.GemvEpiloguesGiveTheSameBits'
save
timeout 60 /tmp/f/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
lat() {  # name model flags...
  local n=$1 m=$2; shift 2
  timeout 90 /tmp/f/run kiln bench latency $m --batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1 "$@" --json $R/lat-$n.json > $R/lat-$n.txt 2>&1
  echo "lat $n rc $? $(python3 -c "import json;d=json.load(open('$R/lat-$n.json'))['decode_step_ms'];print(d['mean'])" 2>/dev/null)"
}
lat fp8-1 /tmp/l8 -q fp8
lat bf16 /tmp/l8
lat fp8-2 /tmp/l8 -q fp8
save
timeout 120 /tmp/f/run kiln build /tmp/l8 --out /tmp/w4 --quant w4a16-rtn --quantize-lm-head > $R/build-w4.txt 2>&1; echo "build rc $?"
lat w4 /tmp/w4
save
