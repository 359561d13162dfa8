#!/bin/bash
# Session 44 call E (H200): the tensor-core FP8 GEMV by layer (KILN_FP8_MMA_EPI bits: 1 plain =
# o and down, 2 SiluMul = gate_up, 4 RoPE = qkv) and form (KILN_FP8_MMA_FORM 0 / 1), against the
# FMA persistent kernel (KILN_FP8_NO_MMA); the mended f16 test and the engine test; a traced step
# of form 1 everywhere.
cd /tmp && tar -xJf "$OLDPWD/.gpu/e.tar.xz" -C /tmp
REPO=$OLDPWD
R=/tmp/call-E; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt 2>/dev/null; tar -cJf $OUT/r.tar.xz -C /tmp call-E; }
t() { local n=$1; shift; timeout 240 /tmp/e/run "$@" > $R/test-$n.txt 2>&1; echo "test $n rc $? $(grep -E '^\[  (PASSED|FAILED)' $R/test-$n.txt | tr '\n' ' ')"; }
t quant quant_test --gtest_filter='GemvFp8Gpu*MmaForm*'
t engine cuda_engine_test --gtest_filter='CudaEngine.Fp8GemvOnTheTensorCoresMatchesTheFmaGemv'
save
timeout 60 /tmp/e/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
lat() {  # name env model flags...
  local n=$1 e=$2 m=$3; shift 3
  env $e timeout 90 /tmp/e/run kiln bench latency $m --batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1 "$@" --json $R/lat-$n.json > $R/lat-$n.txt 2>&1
  echo "lat $n rc $? $(python3 -c "import json;d=json.load(open('$R/lat-$n.json'))['decode_step_ms'];print(d['mean'])" 2>/dev/null)"
}
for round in 1 2; do
  lat fp8-fma-$round KILN_FP8_NO_MMA=1 /tmp/l8 -q fp8
  lat fp8-f1e7-$round "KILN_FP8_MMA_FORM=1 KILN_FP8_MMA_EPI=7" /tmp/l8 -q fp8
  lat fp8-f1e6-$round "KILN_FP8_MMA_FORM=1 KILN_FP8_MMA_EPI=6" /tmp/l8 -q fp8
  lat fp8-f0e6-$round "KILN_FP8_MMA_FORM=0 KILN_FP8_MMA_EPI=6" /tmp/l8 -q fp8
done
save
KILN_FP8_MMA_FORM=1 CUDA_INJECTION64_PATH=/tmp/e/bin/libkiln_kernel_trace.so KILN_TRACE_OUT=/tmp/t.jsonl timeout 90 /tmp/e/run kiln bench latency /tmp/l8 -q fp8 --batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1 --json $R/trace-fp8-f1.json > $R/trace-fp8-f1-run.txt 2>&1
python3 $REPO/bench/kernel_trace_summary.py --trace /tmp/t.jsonl --skip 20 > $R/trace-fp8-f1-summary.txt 2>&1
python3 $REPO/bench/kernel_trace_summary.py --trace /tmp/t.jsonl --skip 20 --by-position > $R/trace-fp8-f1-positions.txt 2>&1
echo "trace rc $?"
save
