#!/usr/bin/env bash
# s30 call C: pair roundings and a swizzled 16-byte-entry angle table in the staging:
# attention_test fp8-cache tests, profile-ops f/u alternating; no offline runs.

set -x
mkdir -p $OUT/r; O=$OUT/r
[ -d /tmp/s30c ] || tar -xJf .gpu/s30c.tar.xz -C /tmp
R=/tmp/s30c/run
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,driver_version --format=csv > $O/gpu.txt
$R attention_test --gtest_filter='PagedAttentionFp8CacheGpu*' > $O/attention_test.txt 2>&1; echo "attention_test rc=$?" >> $O/rc.txt
[ -d /tmp/l8 ] || $R kiln synth --preset llama-3.1-8b --out /tmp/l8 > $O/synth.txt 2>&1
PROF="cuda_bench --model /tmp/l8 -q fp8 --kv-cache-dtype fp8 --sections 4 --max-num-batched-tokens 16384 --gpu-memory-utilization 0.95 --swap-space 16GiB --max-num-seqs 1024 --capacity-policy auto --offline-in 2048 --offline-out 128 --offline-requests 120 --profile-ops"
for run in f_1: u_1:--unfused-q-rope f_2: u_2:--unfused-q-rope; do
  name=${run%%:*}; flag=${run#*:}
  $R $PROF $flag --json $O/ops$name.json > $O/ops$name.txt 2>&1
done
cat $O/rc.txt
cd $OUT && tar -cJf r.tar.xz r && rm -rf r
