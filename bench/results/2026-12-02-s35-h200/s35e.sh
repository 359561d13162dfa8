#!/bin/bash
# Session 35 call E: what the batch-1 FP8 decode step adds to its GEMVs on the H200.
# gemv_bench --chain (call D's variants plus the layer's two RMS norms between the GEMVs), and
# kiln bench latency of the synthetic 8B in FP8 at the default max_model_len (131,072: the decode
# graphs' attention takes its split count from it) and at 4,096 (fewer splits).
cd /tmp && tar -xJf "$OLDPWD/.gpu/e.tar.xz" -C /tmp
R=/tmp/call-E; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt; tar -cJf $OUT/r.tar.xz -C /tmp call-E; }
timeout 120 /tmp/e/run gemv_bench --chain --json $R/chain.json > $R/chain.txt 2>&1; echo "chain rc $?"; cat $R/chain.txt
save
timeout 100 /tmp/e/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
L="--batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1"
for r in 1 2; do
for v in "default:" "len4096:--max-model-len 4096"; do
  n=${v%%:*}-r$r; a=${v#*:}
  timeout 90 /tmp/e/run kiln bench latency /tmp/l8 -q fp8 $a $L --json $R/lat-$n.json > $R/lat-$n.txt 2>&1; echo "lat $n rc $?"; grep "decode step" $R/lat-$n.txt
done
done
save
