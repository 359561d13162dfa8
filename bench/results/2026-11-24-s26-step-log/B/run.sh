#!/usr/bin/env bash
# Session 26 call B: 2048/128 tail: max_utilization, and a bigger pool (0.97).
R=/tmp/s26a/run
[ -x $R ] || tar -xJf .gpu/s26a.tar.xz -C /tmp
[ -d /tmp/l8 ] || $R kiln synth --preset llama-3.1-8b --out /tmp/l8 > /dev/null 2>&1
run() { name=$1; shift
  $R kiln bench offline /tmp/l8 --max-num-batched-tokens 16384 --swap-space 16GiB -q fp8 --kv-cache-dtype fp8 --dataset random --warmup 8 --input-len 2048 --output-len 128 --num-requests 500 --json $OUT/offline_$name.json "$@" > $OUT/offline_$name.txt 2>&1
  echo "$name: $(grep -E 'Output token throughput' $OUT/offline_$name.txt)"; grep -A1 "^Engine" $OUT/offline_$name.txt; }
run maxutil --gpu-memory-utilization 0.95 --capacity-policy max_utilization
run mem97 --gpu-memory-utilization 0.97
