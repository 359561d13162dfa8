#!/bin/bash
# Session 44 call B (H200): W4A16 streamed GEMV with the first row tile's second round copied
# into shared memory before PdlWait (KILN_W4_PRE bits: 1 plain, 2 with the norm, 4 the wide
# form), tests with and without it, batch-1 steps of the synthetic 8B alternated, traced steps.
cd /tmp && tar -xJf "$OLDPWD/.gpu/b.tar.xz" -C /tmp
REPO=$OLDPWD
R=/tmp/call-B; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt 2>/dev/null; tar -cJf $OUT/r.tar.xz -C /tmp call-B; }
nvidia-smi --query-gpu=name,power.limit,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.txt
t() { local n=$1; shift; timeout 200 /tmp/b/run "$@" > $R/test-$n.txt 2>&1; echo "test $n rc $? $(grep -E '^\[  (PASSED|FAILED)' $R/test-$n.txt | tr '\n' ' ')"; }
KILN_W4_PRE=7 t lowbit-pre7 gemm_lowbit_test --gtest_filter='GemmW4Gpu*'
KILN_W4_PRE=7 t engine-pre7 cuda_engine_test --gtest_filter='CudaEngine.W4NormInGemvGivesTheSameBits'
save
timeout 60 /tmp/b/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
timeout 170 /tmp/b/run kiln build /tmp/l8 --out /tmp/w4 --quant w4a16-rtn --quantize-lm-head > $R/build-w4.txt 2>&1; echo "build rc $?"
lat() {  # name env model flags...
  local n=$1 e=$2 m=$3; shift 3
  env $e timeout 60 /tmp/b/run kiln bench latency $m --batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1 "$@" --json $R/lat-$n.json > $R/lat-$n.txt 2>&1
  echo "lat $n rc $? $(python3 -c "import json;d=json.load(open('$R/lat-$n.json'))['decode_step_ms'];print(d['mean'])" 2>/dev/null)"
}
for round in 1 2; do
  for p in 0 7 1 2 4 3; do lat w4-pre$p-$round KILN_W4_PRE=$p /tmp/w4; done
done
save
tr() {  # name env model flags...
  local n=$1 e=$2 m=$3; shift 3
  env $e CUDA_INJECTION64_PATH=/tmp/b/bin/libkiln_kernel_trace.so KILN_TRACE_OUT=/tmp/t-$n.jsonl timeout 90 /tmp/b/run kiln bench latency $m --batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1 "$@" --json $R/trace-$n.json > $R/trace-$n-run.txt 2>&1
  python3 $REPO/bench/kernel_trace_summary.py --trace /tmp/t-$n.jsonl --skip 20 > $R/trace-$n-summary.txt 2>&1
  python3 $REPO/bench/kernel_trace_summary.py --trace /tmp/t-$n.jsonl --skip 20 --by-position > $R/trace-$n-positions.txt 2>&1
  echo "trace $n rc $?"
}
tr w4-pre0 KILN_W4_PRE=0 /tmp/w4
tr w4-pre7 KILN_W4_PRE=7 /tmp/w4
save
