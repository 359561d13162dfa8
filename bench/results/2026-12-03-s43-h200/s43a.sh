#!/bin/bash
# Session 43 call A (H200): L2 prefetch of the weights after a gap in the weight stream
# (KILN_PF_ATTN: from o's start, issued by qkv's blocks as they end, across RoPE + attention;
# KILN_PF_SILU: from down's start, issued by gate_up's blocks, across SiluMul), batch-1 steps of
# the synthetic 8B in W4A16 (4-bit lm_head), FP8 and bf16; traced W4A16 / FP8 steps.
cd /tmp && tar -xJf "$OLDPWD/.gpu/a.tar.xz" -C /tmp
REPO=$OLDPWD
R=/tmp/call-A; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt 2>/dev/null; tar -cJf $OUT/r.tar.xz -C /tmp call-A; }
nvidia-smi --query-gpu=name,power.limit,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.txt
timeout 60 /tmp/a/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
timeout 170 /tmp/a/run kiln build /tmp/l8 --out /tmp/w4 --quant w4a16-rtn --quantize-lm-head > $R/build-w4.txt 2>&1; echo "build rc $?"
lat() {  # name attn silu model flags...
  local n=$1 a=$2 s=$3 m=$4; shift 4
  local env=""; [ "$a" != "-" ] && env="KILN_PF_ATTN=$a"; [ "$s" != "-" ] && env="$env KILN_PF_SILU=$s"
  env $env timeout 60 /tmp/a/run kiln bench latency $m --batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1 "$@" --json $R/lat-$n.json > $R/lat-$n.txt 2>&1
  echo "lat $n rc $? $(python3 -c "import json;d=json.load(open('$R/lat-$n.json'))['decode_step_ms'];print(d['mean'])" 2>/dev/null)"
}
M=1048576
for round in 1 2; do
  lat w4-none-$round - - /tmp/w4
  lat w4-a9-$round $((9*M)) - /tmp/w4
  lat w4-a16-$round $((16*M)) - /tmp/w4
  lat w4-a24-$round $((24*M)) - /tmp/w4
  lat w4-a16s4-$round $((16*M)) $((4*M)) /tmp/w4
  lat w4-a16s8-$round $((16*M)) $((8*M)) /tmp/w4
done
save
for round in 1 2; do
  lat fp8-none-$round - - /tmp/l8 -q fp8
  lat fp8-a18-$round $((18*M)) - /tmp/l8 -q fp8
  lat fp8-a24-$round $((24*M)) - /tmp/l8 -q fp8
  lat fp8-a32-$round $((32*M)) - /tmp/l8 -q fp8
done
save
lat bf16-none - - /tmp/l8
lat bf16-a16 $((16*M)) - /tmp/l8
lat bf16-a32 $((32*M)) - /tmp/l8
save
tr() {  # name attn model flags...
  local n=$1 a=$2 m=$3; shift 3
  local env=""; [ "$a" != "-" ] && env="KILN_PF_ATTN=$a"
  env $env CUDA_INJECTION64_PATH=/tmp/a/bin/libkiln_kernel_trace.so KILN_TRACE_OUT=/tmp/t-$n.jsonl timeout 90 /tmp/a/run kiln bench latency $m --batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1 "$@" --json $R/trace-$n.json > $R/trace-$n-run.txt 2>&1
  python3 $REPO/bench/kernel_trace_summary.py --trace /tmp/t-$n.jsonl --skip 20 > $R/trace-$n-summary.txt 2>&1
  python3 $REPO/bench/kernel_trace_summary.py --trace /tmp/t-$n.jsonl --skip 20 --by-position > $R/trace-$n-positions.txt 2>&1
  echo "trace $n rc $?"
}
tr w4-none - /tmp/w4
tr w4-a16 $((16*M)) /tmp/w4
tr fp8-none - /tmp/l8 -q fp8
save
