#!/bin/bash
# Session 44 call D (H200): the FP8 one-row GEMV on the tensor cores (GemvFp8MmaKernel; forms via
# KILN_FP8_MMA_FORM: 0 = 4 tiles a lane in flight, 3 blocks an SM; 1 = 2 tiles, 3 blocks; 2 = 4
# tiles, 2 blocks; KILN_FP8_NO_MMA = the FMA persistent kernel): kernel and engine tests, batch-1
# FP8 steps of the synthetic 8B alternated, a traced step; W4A16 and bf16 once.
cd /tmp && tar -xJf "$OLDPWD/.gpu/d.tar.xz" -C /tmp
REPO=$OLDPWD
R=/tmp/call-D; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt 2>/dev/null; tar -cJf $OUT/r.tar.xz -C /tmp call-D; }
nvidia-smi --query-gpu=name,power.limit,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.txt
t() { local n=$1; shift; timeout 240 /tmp/d/run "$@" > $R/test-$n.txt 2>&1; echo "test $n rc $? $(grep -E '^\[  (PASSED|FAILED)' $R/test-$n.txt | tr '\n' ' ')"; }
t quant quant_test --gtest_filter='GemvFp8Gpu*'
t gemm gemm_test --gtest_filter='*Fp8*'
t engine cuda_engine_test --gtest_filter='CudaEngine.Fp8GemvOnTheTensorCoresMatchesTheFmaGemv:CudaEngine.GemvEpiloguesGiveTheSameBits'
save
timeout 60 /tmp/d/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
lat() {  # name env model flags...
  local n=$1 e=$2 m=$3; shift 3
  env $e timeout 90 /tmp/d/run kiln bench latency $m --batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1 "$@" --json $R/lat-$n.json > $R/lat-$n.txt 2>&1
  echo "lat $n rc $? $(python3 -c "import json;d=json.load(open('$R/lat-$n.json'))['decode_step_ms'];print(d['mean'])" 2>/dev/null)"
}
for round in 1 2; do
  lat fp8-fma-$round KILN_FP8_NO_MMA=1 /tmp/l8 -q fp8
  lat fp8-mma0-$round KILN_FP8_MMA_FORM=0 /tmp/l8 -q fp8
  lat fp8-mma1-$round KILN_FP8_MMA_FORM=1 /tmp/l8 -q fp8
  lat fp8-mma2-$round KILN_FP8_MMA_FORM=2 /tmp/l8 -q fp8
done
save
CUDA_INJECTION64_PATH=/tmp/d/bin/libkiln_kernel_trace.so KILN_TRACE_OUT=/tmp/t.jsonl timeout 90 /tmp/d/run kiln bench latency /tmp/l8 -q fp8 --batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1 --json $R/trace-fp8-mma.json > $R/trace-fp8-mma-run.txt 2>&1
python3 $REPO/bench/kernel_trace_summary.py --trace /tmp/t.jsonl --skip 20 > $R/trace-fp8-mma-summary.txt 2>&1
python3 $REPO/bench/kernel_trace_summary.py --trace /tmp/t.jsonl --skip 20 --by-position > $R/trace-fp8-mma-positions.txt 2>&1
echo "trace rc $?"
lat bf16 X=0 /tmp/l8
save
