#!/usr/bin/env bash
# Session 25 call F: refactored build: GPU tests, offline FP8 rows.
tar -xJf .gpu/s25f.tar.xz -C /tmp
R=/tmp/s25f/run
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv > $OUT/gpu.txt
$R attention_test > $OUT/attention_test.txt 2>&1; echo "attention_test rc=$?"
grep -E "^\[  (PASSED|FAILED)|FAILED" $OUT/attention_test.txt | head
$R cuda_engine_test > $OUT/cuda_engine_test.txt 2>&1; echo "cuda_engine_test rc=$?"
grep -E "^\[  (PASSED|FAILED)|FAILED" $OUT/cuda_engine_test.txt | head
$R kiln synth --preset llama-3.1-8b --out /tmp/l8 > /dev/null 2>&1
for shape in "2048 128 500" "128 128 4000" "1000 1000 1000"; do
  set -- $shape
  $R kiln bench offline /tmp/l8 --gpu-memory-utilization 0.95 --max-num-batched-tokens 16384 --swap-space 16GiB -q fp8 --kv-cache-dtype fp8 --dataset random --warmup 8 --input-len $1 --output-len $2 --num-requests $3 --json $OUT/offline_$1_$2.json > $OUT/offline_$1_$2.txt 2>&1
  echo "$1/$2: $(grep -E 'Output token throughput' $OUT/offline_$1_$2.txt)"
done
