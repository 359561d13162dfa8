#!/bin/bash
# Session 37 call E: GemvE4m3 (call D: 94 registers, 2 blocks an SM) at other register budgets:
# u4b3 (4 steps in flight, __launch_bounds__(256, 3): 80 registers, 32 bytes spilled), u2b4
# (2 steps, 4 blocks: 56 registers), u4b4 (4 steps, 4 blocks: 64 registers, 72 bytes spilled).
# gemv_bench --chain (its w8a8 row) and --fp8 --rows 1,8 (the w8a8 column, QuantizeRowsFp8 +
# GemvE4m3).
cd /tmp && tar -xJf "$OLDPWD/.gpu/e.tar.xz" -C /tmp
R=/tmp/call-E; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt; tar -cJf $OUT/r.tar.xz -C /tmp call-E; }
for b in gemv_bench_u4b3 gemv_bench_u2b4 gemv_bench_u4b4; do
  timeout 60 /tmp/e/run $b --chain > $R/chain-$b.txt 2>&1; echo "$b chain rc $?"; grep -E "w8a8|SiluMul in" $R/chain-$b.txt | head -2
  timeout 60 /tmp/e/run $b --fp8 --rows 1,8 > $R/fp8-$b.txt 2>&1; echo "$b fp8 rc $?"; grep -E "^(qkv|o|gate_up|down) +(1|8) " $R/fp8-$b.txt
done
save
