#!/bin/bash
# Session 44 call A (H200): W4A16 GEMV's wide form (8 code words a lane, 2 blocks an SM) beyond
# down (KILN_W4_WIDE bits: 1 down, 2 gate_up with the norm in its prologue, 4 lm_head, 8 o in one
# round), the decode attention's split count (KILN_DECODE_SPLITS), batch-1 steps of the
# synthetic 8B in W4A16 (4-bit lm_head), a traced W4A16 step, bf16 and FP8 once each.
cd /tmp && tar -xJf "$OLDPWD/.gpu/a.tar.xz" -C /tmp
REPO=$OLDPWD
R=/tmp/call-A; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt 2>/dev/null; tar -cJf $OUT/r.tar.xz -C /tmp call-A; }
nvidia-smi --query-gpu=name,power.limit,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.txt
t() { local n=$1; shift; timeout 200 /tmp/a/run "$@" > $R/test-$n.txt 2>&1; echo "test $n rc $? $(grep -E '^\[  (PASSED|FAILED)' $R/test-$n.txt | tr '\n' ' ')"; }
t lowbit gemm_lowbit_test --gtest_filter='GemmW4Gpu*'
for w in 1 3 7 15; do KILN_W4_WIDE=$w t engine-$w cuda_engine_test --gtest_filter='CudaEngine.W4NormInGemvGivesTheSameBits'; done
save
timeout 60 /tmp/a/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
timeout 170 /tmp/a/run kiln build /tmp/l8 --out /tmp/w4 --quant w4a16-rtn --quantize-lm-head > $R/build-w4.txt 2>&1; echo "build rc $?"
lat() {  # name env model flags...
  local n=$1 e=$2 m=$3; shift 3
  env $e timeout 60 /tmp/a/run kiln bench latency $m --batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1 "$@" --json $R/lat-$n.json > $R/lat-$n.txt 2>&1
  echo "lat $n rc $? $(python3 -c "import json;d=json.load(open('$R/lat-$n.json'))['decode_step_ms'];print(d['mean'])" 2>/dev/null)"
}
for round in 1 2; do
  for w in 1 3 5 7 9 15; do lat w4-wide$w-$round KILN_W4_WIDE=$w /tmp/w4; done
done
save
for s in 1 2 4 14; do lat w4-splits$s KILN_DECODE_SPLITS=$s /tmp/w4; done
save
tr() {  # name env model flags...
  local n=$1 e=$2 m=$3; shift 3
  env $e CUDA_INJECTION64_PATH=/tmp/a/bin/libkiln_kernel_trace.so KILN_TRACE_OUT=/tmp/t-$n.jsonl timeout 90 /tmp/a/run kiln bench latency $m --batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1 "$@" --json $R/trace-$n.json > $R/trace-$n-run.txt 2>&1
  python3 $REPO/bench/kernel_trace_summary.py --trace /tmp/t-$n.jsonl --skip 20 > $R/trace-$n-summary.txt 2>&1
  python3 $REPO/bench/kernel_trace_summary.py --trace /tmp/t-$n.jsonl --skip 20 --by-position > $R/trace-$n-positions.txt 2>&1
  echo "trace $n rc $?"
}
tr w4-wide7 KILN_W4_WIDE=7 /tmp/w4
tr w4-wide15 KILN_W4_WIDE=15 /tmp/w4
save
lat bf16 KILN_W4_WIDE=7 /tmp/l8
lat fp8 KILN_W4_WIDE=7 /tmp/l8 -q fp8
save
