#!/usr/bin/env bash
# Session 26 call A: 2048/128 with the step log at three step budgets.
tar -xJf .gpu/s26a.tar.xz -C /tmp
R=/tmp/s26a/run
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv > $OUT/gpu.txt
$R kiln synth --preset llama-3.1-8b --out /tmp/l8 > /dev/null 2>&1
for mnbt in 16384 32768 8192; do
  $R kiln bench offline /tmp/l8 --gpu-memory-utilization 0.95 --max-num-batched-tokens $mnbt --swap-space 16GiB -q fp8 --kv-cache-dtype fp8 --dataset random --warmup 8 --input-len 2048 --output-len 128 --num-requests 500 --json $OUT/offline_$mnbt.json --step-log $OUT/steps_$mnbt.json > $OUT/offline_$mnbt.txt 2>&1
  echo "$mnbt: $(grep -E 'Output token throughput' $OUT/offline_$mnbt.txt)"; grep -A1 "^Engine" $OUT/offline_$mnbt.txt
done
