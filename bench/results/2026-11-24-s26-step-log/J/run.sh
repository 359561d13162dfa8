#!/usr/bin/env bash
# Session 26 call J: offline FP8 rows with the committed kernel (s26i) against main + step log
# (s26a, a484fbb's kernels) in the same call.
tar -xJf .gpu/s26i.tar.xz -C /tmp; tar -xJf .gpu/s26a.tar.xz -C /tmp
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv > $OUT/gpu.txt
/tmp/s26i/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > /dev/null 2>&1
run() { name=$1; bin=$2; shift 2
  $bin kiln bench offline /tmp/l8 --gpu-memory-utilization 0.95 --max-num-batched-tokens 16384 --swap-space 16GiB -q fp8 --kv-cache-dtype fp8 --dataset random --warmup 8 "$@" --json $OUT/$name.json > $OUT/$name.txt 2>&1
  echo "$name: $(grep -E 'Output token throughput' $OUT/$name.txt)"; }
run old_2048_128 /tmp/s26a/run --input-len 2048 --output-len 128 --num-requests 500
run new_2048_128 /tmp/s26i/run --input-len 2048 --output-len 128 --num-requests 500 --step-log $OUT/steps_new_2048_128.json
run new_128_128 /tmp/s26i/run --input-len 128 --output-len 128 --num-requests 4000
run new_1000_1000 /tmp/s26i/run --input-len 1000 --output-len 1000 --num-requests 1000
grep -A1 "^Engine" $OUT/new_2048_128.txt
