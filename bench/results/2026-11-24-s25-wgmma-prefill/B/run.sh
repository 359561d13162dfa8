#!/usr/bin/env bash
set -x
tar -xJf .gpu/s25b.tar.xz -C /tmp
R=/tmp/s25b/run
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv > $OUT/gpu.txt
timeout 300 $R attention_test --gtest_filter='*Prefill*' > $OUT/attention_test_prefill.txt 2>&1; echo "rc=$?" >> $OUT/attention_test_prefill.txt
tail -5 $OUT/attention_test_prefill.txt
$R attention_bench --prefill --json $OUT/attention_bench_prefill.json > $OUT/attention_bench_prefill.txt 2>&1
tail -12 $OUT/attention_bench_prefill.txt
$R kiln synth --preset llama-3.1-8b --out /tmp/l8 > /dev/null 2>&1
$R kiln bench offline /tmp/l8 --gpu-memory-utilization 0.95 --max-num-batched-tokens 16384 --swap-space 16GiB -q fp8 --kv-cache-dtype fp8 --dataset random --warmup 8 --input-len 2048 --output-len 128 --num-requests 500 --json $OUT/offline_2048_128.json > $OUT/offline_2048_128.txt 2>&1
grep -E "throughput|Engine:" $OUT/offline_2048_128.txt
