#!/bin/bash
# Session 37 call C: is the W8A16 GEMV bound by its arithmetic? gemv_bench --chain and --fp8
# --rows 1 for three builds that differ only in w8_internal::Dot16: the real one (v0), no
# arithmetic (v1: the weight and x words XORed, results meaningless) and a packed-fp16 form
# (v2: e4m3x2 -> f16x2 and HFMA2 on x taken as f16, results meaningless; the cost of 8 cvt + 8
# HFMA2 a 16-byte chunk instead of ~50 instructions).
cd /tmp && tar -xJf "$OLDPWD/.gpu/c.tar.xz" -C /tmp
R=/tmp/call-C; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt; tar -cJf $OUT/r.tar.xz -C /tmp call-C; }
nvidia-smi --query-gpu=name,power.limit,driver_version --format=csv > $R/gpu.txt
for b in gemv_bench gemv_bench_v1 gemv_bench_v2 gemv_bench; do
  timeout 60 /tmp/c/run $b --chain > $R/chain-$b.txt 2>&1; echo "$b chain rc $?"; sed -n 1,5p $R/chain-$b.txt
  timeout 60 /tmp/c/run $b --fp8 --rows 1 > $R/fp8-$b.txt 2>&1; echo "$b fp8 rc $?"; grep -E "^(qkv|o|gate_up|down|layer)" $R/fp8-$b.txt | head -8
done
save
