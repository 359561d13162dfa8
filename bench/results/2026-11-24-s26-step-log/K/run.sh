#!/usr/bin/env bash
# Session 26 call K: 128/128 old (s26a) and new (s26i) alternating, same call.
[ -x /tmp/s26i/run ] || tar -xJf .gpu/s26i.tar.xz -C /tmp; [ -x /tmp/s26a/run ] || tar -xJf .gpu/s26a.tar.xz -C /tmp
[ -d /tmp/l8 ] || /tmp/s26i/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > /dev/null 2>&1
run() { name=$1; bin=$2; shift 2
  $bin kiln bench offline /tmp/l8 --gpu-memory-utilization 0.95 --max-num-batched-tokens 16384 --swap-space 16GiB -q fp8 --kv-cache-dtype fp8 --dataset random --warmup 8 "$@" --json $OUT/$name.json > /tmp/$name.txt 2>&1
  echo "$name: $(grep -E 'Output token throughput' /tmp/$name.txt)"; }
for i in 1 2; do
  run old_128_128_$i /tmp/s26a/run --input-len 128 --output-len 128 --num-requests 4000
  run new_128_128_$i /tmp/s26i/run --input-len 128 --output-len 128 --num-requests 4000
done
