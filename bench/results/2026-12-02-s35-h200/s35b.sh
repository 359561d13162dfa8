#!/bin/bash
# Session 35 call B: the W8A16 GEMV's occupancy at m = 1. kiln-v0 is call A's code (42 registers
# a thread at m = 1: 5 blocks of 256 threads an SM); kiln-mb6 / kiln-mb8 the same with
# __launch_bounds__(256, 6 / 8) on the 1-row kernels (40 registers, no spills in the plain and
# SiluMul epilogues / 32 registers with spills): room for a 6th / 8th block an SM, so a short
# layer's grid fits in one wave next to the next kernel's first blocks. FP8 batch-1 decode of the
# synthetic Llama-3.1-8B, alternating, three rounds.
cd /tmp && tar -xJf "$OLDPWD/.gpu/b.tar.xz" -C /tmp
R=/tmp/call-B; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt; tar -cJf $OUT/r.tar.xz -C /tmp call-B; }
timeout 100 /tmp/b/run kiln-v0 synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
L="--batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1"
for round in 1 2 3; do
  for v in v0 mb6 mb8; do
    n=$v-r$round
    timeout 90 /tmp/b/run kiln-$v bench latency /tmp/l8 -q fp8 $L --json $R/lat-$n.json > $R/lat-$n.txt 2>&1; echo "lat $n rc $?"; grep "decode step" $R/lat-$n.txt
  done
  save
done
