#!/bin/bash
# Session 41 call E (H200): SiluMul in the prologue of down's streamed W4A16 GEMV
# (W4GemmArgsT::silu, Gemm::LinearW4Silu; --no-gemv-silu for A/B). gemm_lowbit_test W4 (new
# SiluInThePrologueGivesTheSameBits), cuda_engine_test W4 (W4NormInGemvGivesTheSameBits now
# toggles gemv_silu too), the W4A16 batch-1 step with and without, two alternating rounds, greedy
# tokens with and without, and the step's kernel timeline.
cd /tmp && tar -xJf "$OLDPWD/.gpu/e.tar.xz" -C /tmp
REPO=$OLDPWD
R=/tmp/call-E; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt 2>/dev/null; tar -cJf $OUT/r.tar.xz -C /tmp call-E; }
timeout 60 /tmp/e/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
timeout 170 /tmp/e/run kiln build /tmp/l8 --out /tmp/w4 --quant w4a16-rtn --quantize-lm-head > $R/build-w4.txt 2>&1 &
BUILD=$!
timeout 150 /tmp/e/run gemm_lowbit_test --gtest_filter='GemmW4Gpu*' > $R/gemm_lowbit_test.txt 2>&1; echo "gemm_lowbit_test rc $?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|OK \] .*Silu" $R/gemm_lowbit_test.txt | head
timeout 150 /tmp/e/run cuda_engine_test --gtest_filter='*W4*' > $R/cuda_engine_test.txt 2>&1; echo "cuda_engine_test rc $?"; grep -E "OK \]|FAILED \]|PASSED|Failure" $R/cuda_engine_test.txt | head -8
wait $BUILD; echo "build rc $?"
save
lat() {  # name model flags...
  local n=$1 m=$2; shift 2
  timeout 90 /tmp/e/run kiln bench latency $m --batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1 "$@" --json $R/lat-$n.json > $R/lat-$n.txt 2>&1
  echo "lat $n rc $? $(python3 -c "import json;d=json.load(open('$R/lat-$n.json'))['decode_step_ms'];print(d['mean'])" 2>/dev/null)"
}
lat w4-1 /tmp/w4; lat w4-nosilu-1 /tmp/w4 --no-gemv-silu
lat w4-2 /tmp/w4; lat w4-nosilu-2 /tmp/w4 --no-gemv-silu
save
for f in "" "--no-gemv-silu"; do
  n=gen${f:+-nosilu}
  timeout 40 /tmp/e/run kiln generate /tmp/w4 $f --prompt "The quick brown fox" --max-tokens 32 --logprobs 1 --output jsonl 2>/dev/null > $R/$n.txt; echo "$n rc $?"
done
python3 -c "
import re
a,b=[re.sub(r'\"[a-z_]*_ms\":[0-9.]+','',open('$R/'+f).read()) for f in ('gen.txt','gen-nosilu.txt')]
print('generate: the same tokens and logprobs' if a==b and a.strip() else 'generate: DIFFER')"
KILN_TRACE_OUT=/tmp/trace-w4.jsonl CUDA_INJECTION64_PATH=/tmp/e/bin/libkiln_kernel_trace.so timeout 90 /tmp/e/run kiln bench latency /tmp/w4 --batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1 --json $R/lat-w4-traced.json > $R/lat-w4-traced.txt 2>&1; echo "traced rc $?"
python3 $REPO/bench/kernel_trace_summary.py --trace /tmp/trace-w4.jsonl --skip 20 --json $R/trace-w4-summary.json > $R/trace-w4-summary.txt 2>&1; sed -n 3,14p $R/trace-w4-summary.txt
python3 $REPO/bench/kernel_trace_summary.py --trace /tmp/trace-w4.jsonl --skip 20 --by-position > $R/trace-w4-positions.txt 2>&1; sed -n '/ pos /,+10p' $R/trace-w4-positions.txt
save
