#!/bin/bash
# Session 41 call C (H200): the committed build (call B's kernels: the streamed W4A16 GEMV's x
# staged through cp.async) on a fresh machine. The whole gemm_lowbit_test and cuda_engine_test;
# the W4A16, bf16 and FP8 batch-1 steps; the W4A16 and bf16 steps' kernel and copy timelines
# (bench/kernel_trace.cc now records copies too: what runs between two steps' graphs).
cd /tmp && tar -xJf "$OLDPWD/.gpu/c.tar.xz" -C /tmp
REPO=$OLDPWD
R=/tmp/call-C; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt 2>/dev/null; tar -cJf $OUT/r.tar.xz -C /tmp call-C; }
nvidia-smi --query-gpu=name,power.limit,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.txt
timeout 60 /tmp/c/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
timeout 170 /tmp/c/run kiln build /tmp/l8 --out /tmp/w4 --quant w4a16-rtn --quantize-lm-head > $R/build-w4.txt 2>&1 &
BUILD=$!
timeout 160 /tmp/c/run gemm_lowbit_test > $R/gemm_lowbit_test.txt 2>&1; echo "gemm_lowbit_test rc $?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $R/gemm_lowbit_test.txt | head
wait $BUILD; echo "build rc $?"
save
lat() {  # name model flags...
  local n=$1 m=$2; shift 2
  timeout 90 /tmp/c/run kiln bench latency $m --batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1 "$@" --json $R/lat-$n.json > $R/lat-$n.txt 2>&1
  echo "lat $n rc $? $(python3 -c "import json;d=json.load(open('$R/lat-$n.json'))['decode_step_ms'];print(d['mean'])" 2>/dev/null)"
}
lat w4-1 /tmp/w4; lat bf16 /tmp/l8; lat w4-2 /tmp/w4; lat fp8 /tmp/l8 -q fp8
save
trace() {  # name model flags...
  local n=$1 m=$2; shift 2
  KILN_TRACE_OUT=/tmp/trace-$n.jsonl CUDA_INJECTION64_PATH=/tmp/c/bin/libkiln_kernel_trace.so timeout 90 /tmp/c/run kiln bench latency $m --batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1 "$@" --json $R/lat-$n-traced.json > $R/lat-$n-traced.txt 2>&1; echo "traced $n rc $?"
  python3 $REPO/bench/kernel_trace_summary.py --trace /tmp/trace-$n.jsonl --skip 20 --json $R/trace-$n-summary.json > $R/trace-$n-summary.txt 2>&1
  python3 $REPO/bench/kernel_trace_summary.py --trace /tmp/trace-$n.jsonl --skip 20 --by-position > $R/trace-$n-positions.txt 2>&1
  sed -n 1,4p $R/trace-$n-summary.txt; sed -n '/between launches/,$p' $R/trace-$n-summary.txt | head -16
}
trace w4 /tmp/w4
save
trace bf16 /tmp/l8
save
timeout 200 /tmp/c/run cuda_engine_test > $R/cuda_engine_test.txt 2>&1; echo "cuda_engine_test rc $?"; grep -E "FAILED \]|PASSED|tests ran" $R/cuda_engine_test.txt | head -12
save
