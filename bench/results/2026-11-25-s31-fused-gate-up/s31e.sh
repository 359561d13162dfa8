#!/bin/bash
# Session 31 call E: 128/128 x 4,000 and 1000/1000 x 1,000 with the fused gate_up (default); a
# third 2048/128 x 3,000 pair, fused first.
[ -d /tmp/d ] || (cd /tmp && tar -xJf "$OLDPWD/.gpu/d.tar.xz" -C /tmp)
R=/tmp/call-E; mkdir -p $R
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,driver_version --format=csv > $R/gpu.txt
[ -d /tmp/l8 ] || timeout 200 /tmp/d/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1
B="--gpu-memory-utilization 0.95 --max-num-batched-tokens 16384 --swap-space 16GiB -q fp8 --kv-cache-dtype fp8 --dataset random --warmup 8"
run() { local name=$1; shift; timeout 170 /tmp/d/run kiln bench offline /tmp/l8 $B "$@" --json $R/$name.json > $R/$name.txt 2>&1; echo "$name rc $?"; grep "Output token throughput" $R/$name.txt; tail -1 $R/$name.txt; tar -cJf $OUT/r.tar.xz -C /tmp call-E; }
run off128-f --input-len 128 --output-len 128 --num-requests 4000
run off1000-f --input-len 1000 --output-len 1000 --num-requests 1000
run off2048-f --input-len 2048 --output-len 128 --num-requests 3000
run off2048-u --input-len 2048 --output-len 128 --num-requests 3000 --no-fused-gate-up
