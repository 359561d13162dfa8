#!/bin/bash
# Session 42 call A (H200): the W4A16 streamed GEMV with SiluMul / RoPE + KV write in its
# epilogue, decode attention merged in the split kernel's last CTA (no merge kernel), sampling
# kernels chained (PDL), the step inputs uploaded by one kernel. Unit tests, attention_bench
# against the committed kernel (attention_bench_old: HEAD's attention.cu), the batch-1 steps
# (W4A16 with and without the epilogues, bf16, FP8) and the W4A16 step's kernel timeline.
cd /tmp && tar -xJf "$OLDPWD/.gpu/a.tar.xz" -C /tmp
REPO=$OLDPWD
R=/tmp/call-A; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt 2>/dev/null; tar -cJf $OUT/r.tar.xz -C /tmp call-A; }
nvidia-smi --query-gpu=name,power.limit,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.txt
timeout 60 /tmp/a/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
timeout 170 /tmp/a/run kiln build /tmp/l8 --out /tmp/w4 --quant w4a16-rtn --quantize-lm-head > $R/build-w4.txt 2>&1 &
BUILD=$!
t() {  # name filter
  timeout 150 /tmp/a/run $1 --gtest_filter="$2" > $R/$1.txt 2>&1; echo "$1 rc $?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $R/$1.txt | head -8
}
t gemm_lowbit_test '*W4*'
t attention_test '*'
t sampling_test '*'
t step_inputs_test '*'
save
wait $BUILD; echo "build rc $?"
timeout 120 /tmp/a/run attention_bench_old --json $R/attention-old.json > $R/attention-old.txt 2>&1; echo "attn old rc $?"
timeout 120 /tmp/a/run attention_bench --json $R/attention-new.json > $R/attention-new.txt 2>&1; echo "attn new rc $?"
grep -h "decode" $R/attention-old.txt $R/attention-new.txt
save
lat() {  # name model flags...
  local n=$1 m=$2; shift 2
  timeout 90 /tmp/a/run kiln bench latency $m --batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1 "$@" --json $R/lat-$n.json > $R/lat-$n.txt 2>&1
  echo "lat $n rc $? $(python3 -c "import json;d=json.load(open('$R/lat-$n.json'))['decode_step_ms'];print(d['mean'])" 2>/dev/null)"
}
lat w4-1 /tmp/w4; lat w4-noepi /tmp/w4 --no-gemv-silu --no-gemv-rope; lat bf16 /tmp/l8; lat w4-2 /tmp/w4; lat fp8 /tmp/l8 -q fp8
save
trace() {  # name model flags...
  local n=$1 m=$2; shift 2
  KILN_TRACE_OUT=/tmp/trace-$n.jsonl CUDA_INJECTION64_PATH=/tmp/a/bin/libkiln_kernel_trace.so timeout 90 /tmp/a/run kiln bench latency $m --batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1 "$@" --json $R/lat-$n-traced.json > $R/lat-$n-traced.txt 2>&1; echo "traced $n rc $?"
  python3 $REPO/bench/kernel_trace_summary.py --trace /tmp/trace-$n.jsonl --skip 20 --json $R/trace-$n-summary.json > $R/trace-$n-summary.txt 2>&1
  python3 $REPO/bench/kernel_trace_summary.py --trace /tmp/trace-$n.jsonl --skip 20 --by-position > $R/trace-$n-positions.txt 2>&1
  sed -n 1,20p $R/trace-$n-summary.txt; sed -n '/between launches/,$p' $R/trace-$n-summary.txt | head -12
}
trace w4 /tmp/w4
save
timeout 150 /tmp/a/run cuda_engine_test --gtest_filter='*W4Norm*:*Async*:*Graph*' > $R/cuda_engine_test.txt 2>&1; echo "cuda_engine_test rc $?"; grep -E "FAILED \]|PASSED|tests ran" $R/cuda_engine_test.txt | head -12
save
