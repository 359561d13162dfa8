#!/bin/bash
# Session 37 call B: the persistent GEMV's L2 prefetch before PdlWait only
# (KILN_GEMV_PREFETCH_ROUNDS=-N: N rounds of each warp's first row, no prefetch in the loop),
# gemv_bench --chain and the FP8 batch-1 decode step, alternating with the default (0).
cd /tmp && tar -xJf "$OLDPWD/.gpu/b.tar.xz" -C /tmp
R=/tmp/call-B; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt; tar -cJf $OUT/r.tar.xz -C /tmp call-B; }
nvidia-smi --query-gpu=name,power.limit,driver_version --format=csv > $R/gpu.txt
timeout 100 /tmp/b/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
for r in 0 -1 -3 -6 0; do
  KILN_GEMV_PREFETCH_ROUNDS=$r timeout 60 /tmp/b/run gemv_bench --chain > $R/chain-pf$r.txt 2>&1; echo "chain pf$r rc $?"; sed -n 3,5p $R/chain-pf$r.txt
done
save
L="--batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1"
lat() {  # name pf
  KILN_GEMV_PREFETCH_ROUNDS=$2 timeout 90 /tmp/b/run kiln bench latency /tmp/l8 -q fp8 $L --json $R/lat-$1.json > $R/lat-$1.txt 2>&1
  echo "lat $1 rc $? $(python3 -c "import json;print(json.load(open('$R/lat-$1.json'))['decode_step_ms']['mean'])" 2>/dev/null)"
}
lat p0 0; lat pm6 -6; lat p0-r2 0; lat pm6-r2 -6
save
