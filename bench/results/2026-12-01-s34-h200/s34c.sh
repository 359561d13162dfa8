#!/bin/bash
# Session 34 call C (H200, ff7a5d6's code): where the batch-1 step goes on the H200. The decode
# linear layers alone at m = 1 (gemv_bench --fp8 --rows 1; --w4 --rows 1), each next to the copy
# bandwidth, and the per-op device time of FP8 batch-1 decode steps (cuda_bench --sections 1
# --profile-ops: kernels launched one by one with events between them, no graph).
cd /tmp && tar -xJf "$OLDPWD/.gpu/c.tar.xz" -C /tmp
R=/tmp/call-C; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt; tar -cJf $OUT/r.tar.xz -C /tmp call-C; }
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,driver_version --format=csv > $R/gpu.txt
timeout 60 /tmp/c/run gemv_bench --fp8 --rows 1 --json $R/gemv-fp8.json > $R/gemv-fp8.txt 2>&1; echo "gemv fp8 rc $?"; cat $R/gemv-fp8.txt
timeout 60 /tmp/c/run gemv_bench --w4 --rows 1 --json $R/gemv-w4.json > $R/gemv-w4.txt 2>&1; echo "gemv w4 rc $?"; cat $R/gemv-w4.txt
save
timeout 60 /tmp/c/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
timeout 120 /tmp/c/run cuda_bench --model /tmp/l8 -q fp8 --sections 1 --skip-offline --profile-ops --json $R/ops-fp8.json > $R/ops-fp8.txt 2>&1; echo "ops rc $?"; cat $R/ops-fp8.txt | grep -v "^I "
save
