#!/bin/bash
# Session 41 call A (H200): the streamed W4A16 GEMV with row tiles split over blocks where an even
# share of the rounds walks fewer of them (down of the 8B: 5 rounds on 396 blocks instead of 7 on
# 256). gemm_lowbit_test W4 (new split cases), cuda_engine_test W4, gemv_bench --w4 --rows 1
# (whole tiles against split), gemv_bench --chain --w4, the W4A16 batch-1 step (default /
# --no-gemv-split, two alternating rounds), greedy tokens, bf16 batch-1, and the kernel timeline
# of one W4A16 and one FP8 latency run (bench/kernel_trace.cc, CUPTI injection).
cd /tmp && tar -xJf "$OLDPWD/.gpu/a.tar.xz" -C /tmp
REPO=$OLDPWD
R=/tmp/call-A; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt 2>/dev/null; tar -cJf $OUT/r.tar.xz -C /tmp call-A; }
nvidia-smi --query-gpu=name,power.limit,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.txt
timeout 150 /tmp/a/run gemm_lowbit_test --gtest_filter='GemmW4Gpu*' > $R/gemm_lowbit_test.txt 2>&1; echo "gemm_lowbit_test rc $?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $R/gemm_lowbit_test.txt | head
timeout 60 /tmp/a/run gemv_bench --w4 --rows 1 --json $R/gemv-w4.json > $R/gemv-w4.txt 2>&1; echo "gemv_bench rc $?"; grep -E "^qkv|^o |^gate|^down|layer|whole" $R/gemv-w4.txt
save
timeout 60 /tmp/a/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
timeout 170 /tmp/a/run kiln build /tmp/l8 --out /tmp/w4 --quant w4a16-rtn --quantize-lm-head > $R/build-w4.txt 2>&1; echo "build rc $?"
lat() {  # name model flags...
  local n=$1 m=$2; shift 2
  timeout 90 /tmp/a/run kiln bench latency $m --batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1 "$@" --json $R/lat-$n.json > $R/lat-$n.txt 2>&1
  echo "lat $n rc $? $(python3 -c "import json;d=json.load(open('$R/lat-$n.json'))['decode_step_ms'];print(d['mean'])" 2>/dev/null)"
}
lat w4-1 /tmp/w4; lat w4-whole-1 /tmp/w4 --no-gemv-split
lat w4-2 /tmp/w4; lat w4-whole-2 /tmp/w4 --no-gemv-split
save
for f in "" "--no-gemv-split"; do
  n=gen${f:+-whole}
  timeout 40 /tmp/a/run kiln generate /tmp/w4 $f --prompt "The quick brown fox" --max-tokens 32 --logprobs 1 --output jsonl 2>/dev/null > $R/$n.txt; echo "$n rc $?"
done
python3 -c "
import json,re
a,b=[[json.loads(l) for l in open('$R/'+f) if l.strip()] for f in ('gen.txt','gen-whole.txt')]
print('generate lines', len(a), len(b))
print(open('$R/gen.txt').read()[:600])
"
timeout 120 /tmp/a/run cuda_engine_test --gtest_filter='*W4*' > $R/cuda_engine_test.txt 2>&1; echo "cuda_engine_test rc $?"; grep -E "OK \]|FAILED \]|PASSED" $R/cuda_engine_test.txt | head -12
save
timeout 90 /tmp/a/run gemv_bench --chain --w4 --json $R/chain-w4.json > $R/chain-w4.txt 2>&1; echo "chain rc $?"; grep -E "ms|roofline" $R/chain-w4.txt | head -20
save
# The kernel timeline of a W4A16 latency run (CUPTI; graph replays of the decode steps).
export KILN_TRACE_OUT=/tmp/trace-w4.jsonl
CUDA_INJECTION64_PATH=/tmp/a/bin/libkiln_kernel_trace.so timeout 90 /tmp/a/run kiln bench latency /tmp/w4 --batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1 --json $R/lat-w4-traced.json > $R/lat-w4-traced.txt 2>&1; echo "traced rc $? $(wc -l < /tmp/trace-w4.jsonl)"
python3 $REPO/bench/kernel_trace_summary.py --trace /tmp/trace-w4.jsonl --skip 20 --json $R/trace-w4-summary.json > $R/trace-w4-summary.txt 2>&1; echo "summary rc $?"; head -40 $R/trace-w4-summary.txt
python3 $REPO/bench/kernel_trace_summary.py --trace /tmp/trace-w4.jsonl --skip 20 --by-position > $R/trace-w4-positions.txt 2>&1
head -c 3000000 /tmp/trace-w4.jsonl > $R/trace-w4-head.jsonl
save
lat bf16 /tmp/l8
save
export KILN_TRACE_OUT=/tmp/trace-fp8.jsonl
CUDA_INJECTION64_PATH=/tmp/a/bin/libkiln_kernel_trace.so timeout 90 /tmp/a/run kiln bench latency /tmp/l8 -q fp8 --batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1 --json $R/lat-fp8-traced.json > $R/lat-fp8-traced.txt 2>&1; echo "fp8 traced rc $?"
python3 $REPO/bench/kernel_trace_summary.py --trace /tmp/trace-fp8.jsonl --skip 20 --json $R/trace-fp8-summary.json > $R/trace-fp8-summary.txt 2>&1; head -30 $R/trace-fp8-summary.txt
python3 $REPO/bench/kernel_trace_summary.py --trace /tmp/trace-fp8.jsonl --skip 20 --by-position > $R/trace-fp8-positions.txt 2>&1
save
