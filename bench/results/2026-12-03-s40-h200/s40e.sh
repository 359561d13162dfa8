#!/bin/bash
# Session 40 call E (H200): the committed gemv_bench (its W4 weights and graph timing made by
# shared helpers after call D): --chain --w4, --chain (FP8), --w4 --rows 1.
cd /tmp && tar -xJf "$OLDPWD/.gpu/e.tar.xz" -C /tmp
R=/tmp/call-E; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt; tar -cJf $OUT/r.tar.xz -C /tmp call-E; }
nvidia-smi --query-gpu=name,power.limit,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.txt
timeout 80 /tmp/e/run gemv_bench --chain --w4 --json $R/chain-w4.json > $R/chain-w4.txt 2>&1; echo "chain w4 rc $?"; tail -11 $R/chain-w4.txt
save
timeout 50 /tmp/e/run gemv_bench --w4 --rows 1 --json $R/gemv-w4.json > $R/gemv-w4.txt 2>&1; echo "gemv w4 rc $?"; grep -E "^qkv|^o |^gate|^down|layer" $R/gemv-w4.txt
save
timeout 60 /tmp/e/run gemv_bench --chain --json $R/chain-fp8.json > $R/chain-fp8.txt 2>&1; echo "chain fp8 rc $?"; tail -7 $R/chain-fp8.txt
save
