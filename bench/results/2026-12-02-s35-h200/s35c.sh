#!/bin/bash
# Session 35 call C: the W8A16 GEMV at m = 1 with *fewer* blocks an SM (call B: 6 and 8 were
# slower than 5). kiln-v0: call A's code (4 16-byte loads in flight a lane, 42 registers: 5 blocks
# of 256 threads an SM); kiln-u8: 8 loads in flight a lane (a whole 4,096-wide row; 58-64
# registers: 4 blocks an SM); kiln-occ4: v0 with 52 KiB of unused dynamic shared memory a block
# (4 blocks an SM). FP8 batch-1 decode of the synthetic Llama-3.1-8B, alternating, three rounds.
cd /tmp && tar -xJf "$OLDPWD/.gpu/c.tar.xz" -C /tmp
R=/tmp/call-C; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt; tar -cJf $OUT/r.tar.xz -C /tmp call-C; }
timeout 100 /tmp/c/run kiln-v0 synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
L="--batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1"
for round in 1 2 3; do
  for v in v0 u8 occ4; do
    n=$v-r$round
    timeout 90 /tmp/c/run kiln-$v bench latency /tmp/l8 -q fp8 $L --json $R/lat-$n.json > $R/lat-$n.txt 2>&1; echo "lat $n rc $?"; grep "decode step" $R/lat-$n.txt
  done
  save
done
