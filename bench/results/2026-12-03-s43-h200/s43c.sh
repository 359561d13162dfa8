#!/bin/bash
# Session 43 call C (H200): the review mends' tests (weight_upload_test, the W4 epilogue tests),
# and an experiment: down's streamed GEMV in a wide form (KILN_W4_WIDE=1: 7 warps of 8 slots, 2
# blocks an SM, for k a multiple of 3,584) against the committed form, alternated on one machine;
# a traced W4A16 step with it.
cd /tmp && tar -xJf "$OLDPWD/.gpu/c.tar.xz" -C /tmp
REPO=$OLDPWD
R=/tmp/call-C; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt 2>/dev/null; tar -cJf $OUT/r.tar.xz -C /tmp call-C; }
nvidia-smi --query-gpu=name,power.limit,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.txt
t() { local n=$1; shift; timeout 300 "$@" > $R/test-$n.txt 2>&1; echo "test $n rc $? $(grep -E '^\[  (PASSED|FAILED)' $R/test-$n.txt | tr '\n' ' ')"; }
t upload /tmp/c/run weight_upload_test
t lowbit env KILN_W4_WIDE=0 /tmp/c/run gemm_lowbit_test --gtest_filter='GemmW4Gpu*'
t lowbit-wide env KILN_W4_WIDE=1 /tmp/c/run gemm_lowbit_test --gtest_filter='GemmW4Gpu*'
t elementwise /tmp/c/run elementwise_test --gtest_filter='*SiluMul*:*RopeStoreKv*'
t engine /tmp/c/run cuda_engine_test --gtest_filter='CudaEngine.W4NormInGemvGivesTheSameBits'
save
timeout 60 /tmp/c/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
timeout 170 /tmp/c/run kiln build /tmp/l8 --out /tmp/w4 --quant w4a16-rtn --quantize-lm-head > $R/build-w4.txt 2>&1; echo "build rc $?"
lat() {  # name wide flags...
  local n=$1 w=$2; shift 2
  env KILN_W4_WIDE=$w timeout 60 /tmp/c/run kiln bench latency /tmp/w4 --batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1 "$@" --json $R/lat-$n.json > $R/lat-$n.txt 2>&1
  echo "lat $n rc $? $(python3 -c "import json;d=json.load(open('$R/lat-$n.json'))['decode_step_ms'];print(d['mean'])" 2>/dev/null)"
}
for round in 1 2 3; do
  lat w4-$round 0
  lat w4-wide-$round 1
done
save
KILN_W4_WIDE=1 CUDA_INJECTION64_PATH=/tmp/c/bin/libkiln_kernel_trace.so KILN_TRACE_OUT=/tmp/t.jsonl timeout 90 /tmp/c/run kiln bench latency /tmp/w4 --batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1 --json $R/trace-w4-wide.json > $R/trace-w4-wide-run.txt 2>&1
python3 $REPO/bench/kernel_trace_summary.py --trace /tmp/t.jsonl --skip 20 > $R/trace-w4-wide-summary.txt 2>&1
python3 $REPO/bench/kernel_trace_summary.py --trace /tmp/t.jsonl --skip 20 --by-position > $R/trace-w4-wide-positions.txt 2>&1
echo "trace rc $?"
save
