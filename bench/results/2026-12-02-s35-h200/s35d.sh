#!/bin/bash
# Session 35 call D: how much of the H200's batch-1 FP8 decode step the W8A16 GEMVs take.
# gemv_bench --chain (the 128 GEMVs of a step of the 8B, 32 layers of their own weights, in a
# CUDA graph: with PDL and SiluMul in gate_up's epilogue as the runner does, with SiluMul apart,
# without PDL), twice; then kiln bench latency of the synthetic 8B in FP8 with and without PDL.
cd /tmp && tar -xJf "$OLDPWD/.gpu/d.tar.xz" -C /tmp
R=/tmp/call-D; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt; tar -cJf $OUT/r.tar.xz -C /tmp call-D; }
for r in 1 2; do
  timeout 120 /tmp/d/run gemv_bench --chain --json $R/chain-$r.json > $R/chain-$r.txt 2>&1; echo "chain $r rc $?"; cat $R/chain-$r.txt
done
save
timeout 100 /tmp/d/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
L="--batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1"
for v in "pdl:" "nopdl:--no-pdl"; do
  n=${v%%:*}; a=${v#*:}
  timeout 90 /tmp/d/run kiln bench latency /tmp/l8 -q fp8 $a $L --json $R/lat-$n.json > $R/lat-$n.txt 2>&1; echo "lat $n rc $?"; grep "decode step" $R/lat-$n.txt
done
save
