#!/bin/bash
# Session 43 call B (H200): SiluMul and RoPE + KV write in the one-token W4A16 GEMV's epilogues
# (gate_up rows in runs of 8, q / k rows in RoPE's interleaved pair order, stored so at upload).
# The new tests first; then the batch-1 steps of the synthetic 8B: kiln (this build), kiln with
# --no-gemv-silu --no-gemv-rope, and kiln_head (HEAD's W4A16 kernels, SiluMul, runner) alternated
# on one machine; bf16 and FP8 of kiln_head and kiln; a traced W4A16 step.
cd /tmp && tar -xJf "$OLDPWD/.gpu/b.tar.xz" -C /tmp
REPO=$OLDPWD
R=/tmp/call-B; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt 2>/dev/null; tar -cJf $OUT/r.tar.xz -C /tmp call-B; }
nvidia-smi --query-gpu=name,power.limit,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.txt
t() { local n=$1; shift; timeout 300 /tmp/b/run "$@" > $R/test-$n.txt 2>&1; echo "test $n rc $? $(grep -E '^\[  (PASSED|FAILED)' $R/test-$n.txt | tr '\n' ' ')"; }
t elementwise elementwise_test --gtest_filter='*SiluMul*:*RopeStoreKv*'
t lowbit gemm_lowbit_test --gtest_filter='GemmW4Gpu*'
t engine cuda_engine_test --gtest_filter='CudaEngine.W4NormInGemvGivesTheSameBits:CudaEngine.GemvEpiloguesGiveTheSameBits:CudaEngine.AsyncSchedulingMatchesSync'
save
timeout 60 /tmp/b/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
timeout 170 /tmp/b/run kiln build /tmp/l8 --out /tmp/w4 --quant w4a16-rtn --quantize-lm-head > $R/build-w4.txt 2>&1; echo "build rc $?"
lat() {  # name binary model flags...
  local n=$1 b=$2 m=$3; shift 3
  timeout 60 /tmp/b/run $b bench latency $m --batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1 "$@" --json $R/lat-$n.json > $R/lat-$n.txt 2>&1
  echo "lat $n rc $? $(python3 -c "import json;d=json.load(open('$R/lat-$n.json'))['decode_step_ms'];print(d['mean'])" 2>/dev/null)"
}
for round in 1 2; do
  lat w4-head-$round kiln_head /tmp/w4
  lat w4-new-$round kiln /tmp/w4
  lat w4-noepi-$round kiln /tmp/w4 --no-gemv-silu --no-gemv-rope
done
save
lat bf16-head kiln_head /tmp/l8
lat bf16-new kiln /tmp/l8
lat fp8-head kiln_head /tmp/l8 -q fp8
lat fp8-new kiln /tmp/l8 -q fp8
lat w4-head-3 kiln_head /tmp/w4
lat w4-new-3 kiln /tmp/w4
save
CUDA_INJECTION64_PATH=/tmp/b/bin/libkiln_kernel_trace.so KILN_TRACE_OUT=/tmp/t.jsonl timeout 90 /tmp/b/run kiln bench latency /tmp/w4 --batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1 --json $R/trace-w4.json > $R/trace-w4-run.txt 2>&1
python3 $REPO/bench/kernel_trace_summary.py --trace /tmp/t.jsonl --skip 20 > $R/trace-w4-summary.txt 2>&1
python3 $REPO/bench/kernel_trace_summary.py --trace /tmp/t.jsonl --skip 20 --by-position > $R/trace-w4-positions.txt 2>&1
echo "trace rc $?"
save
