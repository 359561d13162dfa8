#!/bin/bash
# Session 42 call B (H200): three kiln binaries on one machine, alternated:
#   kiln_head  the committed kernels (f294743: per-array step-input copies, the sampling kernels
#              launched plainly);
#   kiln_base  + the step inputs uploaded by one kernel (UploadStepInputs) and the sampling
#              kernels chained (PDL), FinalizeKernel reading the partials in one round trip;
#   kiln       + decode attention's and RoPE's step-input reads and the decode prologue's K/V
#              tiles (all but the newest position's) issued before PdlWait.
# Unit tests of the new build, attention_bench against HEAD's kernels, the batch-1 steps of the
# synthetic 8B (W4A16, bf16, FP8) and the W4A16 step's timeline under the new build.
cd /tmp && tar -xJf "$OLDPWD/.gpu/b.tar.xz" -C /tmp
REPO=$OLDPWD
R=/tmp/call-B; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt 2>/dev/null; tar -cJf $OUT/r.tar.xz -C /tmp call-B; }
nvidia-smi --query-gpu=name,power.limit,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.txt
timeout 60 /tmp/b/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
timeout 170 /tmp/b/run kiln build /tmp/l8 --out /tmp/w4 --quant w4a16-rtn --quantize-lm-head > $R/build-w4.txt 2>&1 &
BUILD=$!
t() {  # name filter
  timeout 150 /tmp/b/run $1 --gtest_filter="$2" > $R/$1.txt 2>&1; echo "$1 rc $?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $R/$1.txt | head -8
}
t attention_test '*Decode*:*decode*'
t elementwise_test '*Rope*'
t step_inputs_test '*'
t sampling_test '*'
timeout 100 /tmp/b/run attention_bench_old --json $R/attention-old.json > $R/attention-old.txt 2>&1; echo "attn old rc $?"
timeout 100 /tmp/b/run attention_bench --json $R/attention-new.json > $R/attention-new.txt 2>&1; echo "attn new rc $?"
grep -h "decode" $R/attention-old.txt $R/attention-new.txt
save
wait $BUILD; echo "build rc $?"
lat() {  # name binary model flags...
  local n=$1 b=$2 m=$3; shift 3
  timeout 60 /tmp/b/run $b bench latency $m --batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1 "$@" --json $R/lat-$n.json > $R/lat-$n.txt 2>&1
  echo "lat $n rc $? $(python3 -c "import json;d=json.load(open('$R/lat-$n.json'))['decode_step_ms'];print(d['mean'])" 2>/dev/null)"
}
for round in 1 2; do
  for b in kiln_head kiln_base kiln; do lat w4-$b-$round $b /tmp/w4; done
done
save
for b in kiln_head kiln_base kiln; do lat bf16-$b $b /tmp/l8; done
for b in kiln_head kiln; do lat fp8-$b $b /tmp/l8 -q fp8; done
save
KILN_TRACE_OUT=/tmp/trace-w4.jsonl CUDA_INJECTION64_PATH=/tmp/b/bin/libkiln_kernel_trace.so timeout 60 /tmp/b/run kiln bench latency /tmp/w4 --batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1 --json $R/lat-w4-traced.json > $R/lat-w4-traced.txt 2>&1; echo "traced rc $?"
python3 $REPO/bench/kernel_trace_summary.py --trace /tmp/trace-w4.jsonl --skip 20 --json $R/trace-w4-summary.json > $R/trace-w4-summary.txt 2>&1
python3 $REPO/bench/kernel_trace_summary.py --trace /tmp/trace-w4.jsonl --skip 20 --by-position > $R/trace-w4-positions.txt 2>&1
sed -n 1,22p $R/trace-w4-summary.txt; sed -n 1,16p $R/trace-w4-positions.txt | tail -10
save
timeout 170 /tmp/b/run cuda_engine_test > $R/cuda_engine_test.txt 2>&1; echo "cuda_engine_test rc $?"; grep -E "FAILED \]|PASSED|tests ran" $R/cuda_engine_test.txt | head -12
save
