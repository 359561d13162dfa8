#!/bin/bash
# Session 42 call C (H200): kiln_s42b (call B's new build, committed as a61bafb) against kiln
# (+ the decode merge kernel loading up to 16 splits' partials at once; the streamed W4A16 GEMV
# prefetching its first item's second round of code words into L2 before PdlWait), alternated
# on one machine; the new build's unit tests, W4A16 step timeline and engine tests.
cd /tmp && tar -xJf "$OLDPWD/.gpu/c.tar.xz" -C /tmp
REPO=$OLDPWD
R=/tmp/call-C; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt 2>/dev/null; tar -cJf $OUT/r.tar.xz -C /tmp call-C; }
nvidia-smi --query-gpu=name,power.limit,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.txt
timeout 60 /tmp/c/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
timeout 170 /tmp/c/run kiln build /tmp/l8 --out /tmp/w4 --quant w4a16-rtn --quantize-lm-head > $R/build-w4.txt 2>&1 &
BUILD=$!
t() {  # name filter
  timeout 150 /tmp/c/run $1 --gtest_filter="$2" > $R/$1.txt 2>&1; echo "$1 rc $?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $R/$1.txt | head -8
}
t attention_test '*'
t gemm_lowbit_test '*W4*'
save
wait $BUILD; echo "build rc $?"
lat() {  # name binary model flags...
  local n=$1 b=$2 m=$3; shift 3
  timeout 60 /tmp/c/run $b bench latency $m --batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1 "$@" --json $R/lat-$n.json > $R/lat-$n.txt 2>&1
  echo "lat $n rc $? $(python3 -c "import json;d=json.load(open('$R/lat-$n.json'))['decode_step_ms'];print(d['mean'])" 2>/dev/null)"
}
for round in 1 2 3; do
  for b in kiln_s42b kiln; do lat w4-$b-$round $b /tmp/w4; done
done
for b in kiln_s42b kiln; do lat bf16-$b $b /tmp/l8; done
save
KILN_TRACE_OUT=/tmp/trace-w4.jsonl CUDA_INJECTION64_PATH=/tmp/c/bin/libkiln_kernel_trace.so timeout 60 /tmp/c/run kiln bench latency /tmp/w4 --batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1 --json $R/lat-w4-traced.json > $R/lat-w4-traced.txt 2>&1; echo "traced rc $?"
python3 $REPO/bench/kernel_trace_summary.py --trace /tmp/trace-w4.jsonl --skip 20 --json $R/trace-w4-summary.json > $R/trace-w4-summary.txt 2>&1
python3 $REPO/bench/kernel_trace_summary.py --trace /tmp/trace-w4.jsonl --skip 20 --by-position > $R/trace-w4-positions.txt 2>&1
sed -n 1,20p $R/trace-w4-summary.txt; sed -n 1,16p $R/trace-w4-positions.txt | tail -10
save
timeout 150 /tmp/c/run cuda_engine_test --gtest_filter='*W4*:*Async*:*MatchesCpu*:*AloneAndBatched*' > $R/cuda_engine_test.txt 2>&1; echo "cuda_engine_test rc $?"; grep -E "FAILED \]|PASSED|tests ran" $R/cuda_engine_test.txt | head -12
save
