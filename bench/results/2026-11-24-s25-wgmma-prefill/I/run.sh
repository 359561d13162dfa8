#!/usr/bin/env bash
# Session 25 call I: per-op device time of 2048/128 prompt steps with the wgmma prefill kernel.
tar -xJf .gpu/s25i.tar.xz -C /tmp
R=/tmp/s25i/run
$R kiln synth --preset llama-3.1-8b --out /tmp/l8 > /dev/null 2>&1
$R cuda_bench --model /tmp/l8 -q fp8 --kv-cache-dtype fp8 --sections 4 --profile-ops --offline-in 2048 --offline-out 128 --offline-requests 48 --max-num-batched-tokens 16384 --gpu-memory-utilization 0.95 --json $OUT/profile_2048_128.json > $OUT/profile_2048_128.txt 2>&1
echo rc=$?
grep -v "^I " $OUT/profile_2048_128.txt | tail -60
