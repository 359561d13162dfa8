#!/bin/bash
# Session 42 call D (H200): the session's final build (kiln: call B's kernels + the merge
# kernel's one-batch loads; call C's L2 prefetch dropped) against kiln_s42b (a61bafb) and
# kiln_head (f294743, the session's start), alternated on one machine: the batch-1 steps of the
# synthetic 8B, W4A16 (4-bit lm_head), bf16 and FP8.
cd /tmp && tar -xJf "$OLDPWD/.gpu/d.tar.xz" -C /tmp
R=/tmp/call-D; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt 2>/dev/null; tar -cJf $OUT/r.tar.xz -C /tmp call-D; }
nvidia-smi --query-gpu=name,power.limit,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.txt
timeout 60 /tmp/d/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
timeout 170 /tmp/d/run kiln build /tmp/l8 --out /tmp/w4 --quant w4a16-rtn --quantize-lm-head > $R/build-w4.txt 2>&1; echo "build rc $?"
lat() {  # name binary model flags...
  local n=$1 b=$2 m=$3; shift 3
  timeout 60 /tmp/d/run $b bench latency $m --batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1 "$@" --json $R/lat-$n.json > $R/lat-$n.txt 2>&1
  echo "lat $n rc $? $(python3 -c "import json;d=json.load(open('$R/lat-$n.json'))['decode_step_ms'];print(d['mean'])" 2>/dev/null)"
}
for round in 1 2; do
  for b in kiln_head kiln_s42b kiln; do lat w4-$b-$round $b /tmp/w4; done
done
save
for b in kiln_head kiln; do lat bf16-$b $b /tmp/l8; done
for b in kiln_head kiln; do lat fp8-$b $b /tmp/l8 -q fp8; done
save
