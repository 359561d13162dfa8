#!/bin/bash
# Session 44 call C (H200): how fast the batch-1 steps would be if the GEMVs' math were free.
# KILN_NO_MATH (experiment build): the FP8 W8A16 persistent GEMV and the W4A16 streamed GEMV
# stream the same weights in the same order but fold each 16-byte word with 3 LOPs instead of
# the dequantization and dot product / mma (wrong outputs, real timing). Steps of the synthetic
# 8B in W4A16 (4-bit lm_head) and FP8, with and without, alternated; traced steps.
cd /tmp && tar -xJf "$OLDPWD/.gpu/c.tar.xz" -C /tmp
REPO=$OLDPWD
R=/tmp/call-C; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt 2>/dev/null; tar -cJf $OUT/r.tar.xz -C /tmp call-C; }
nvidia-smi --query-gpu=name,power.limit,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.txt
timeout 60 /tmp/c/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
timeout 170 /tmp/c/run kiln build /tmp/l8 --out /tmp/w4 --quant w4a16-rtn --quantize-lm-head > $R/build-w4.txt 2>&1; echo "build rc $?"
lat() {  # name env model flags...
  local n=$1 e=$2 m=$3; shift 3
  env $e timeout 60 /tmp/c/run kiln bench latency $m --batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1 "$@" --json $R/lat-$n.json > $R/lat-$n.txt 2>&1
  echo "lat $n rc $? $(python3 -c "import json;d=json.load(open('$R/lat-$n.json'))['decode_step_ms'];print(d['mean'])" 2>/dev/null)"
}
for round in 1 2; do
  lat w4-$round X=0 /tmp/w4
  lat w4-nomath-$round KILN_NO_MATH=1 /tmp/w4
  lat fp8-$round X=0 /tmp/l8 -q fp8
  lat fp8-nomath-$round KILN_NO_MATH=1 /tmp/l8 -q fp8
done
save
tr() {  # name env model flags...
  local n=$1 e=$2 m=$3; shift 3
  env $e CUDA_INJECTION64_PATH=/tmp/c/bin/libkiln_kernel_trace.so KILN_TRACE_OUT=/tmp/t-$n.jsonl timeout 90 /tmp/c/run kiln bench latency $m --batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1 "$@" --json $R/trace-$n.json > $R/trace-$n-run.txt 2>&1
  python3 $REPO/bench/kernel_trace_summary.py --trace /tmp/t-$n.jsonl --skip 20 > $R/trace-$n-summary.txt 2>&1
  python3 $REPO/bench/kernel_trace_summary.py --trace /tmp/t-$n.jsonl --skip 20 --by-position > $R/trace-$n-positions.txt 2>&1
  echo "trace $n rc $?"
}
tr w4-nomath KILN_NO_MATH=1 /tmp/w4
tr fp8 X=0 /tmp/l8 -q fp8
tr fp8-nomath KILN_NO_MATH=1 /tmp/l8 -q fp8
save
