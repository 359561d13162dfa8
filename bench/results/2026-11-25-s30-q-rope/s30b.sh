#!/usr/bin/env bash
# s30 call B: the staging reordered (loads together, one table row a thread, sign-flip neox
# rotation): attention_test's fp8-cache tests, profile-ops f/u alternating, an offline
# 2048/128 x 3000 pair (f, u).
set -x
mkdir -p $OUT/r; O=$OUT/r
[ -d /tmp/s30b ] || tar -xJf .gpu/s30b.tar.xz -C /tmp
R=/tmp/s30b/run
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,driver_version --format=csv > $O/gpu.txt
$R attention_test --gtest_filter='PagedAttentionFp8CacheGpu*' > $O/attention_test.txt 2>&1; echo "attention_test rc=$?" >> $O/rc.txt
[ -d /tmp/l8 ] || $R kiln synth --preset llama-3.1-8b --out /tmp/l8 > $O/synth.txt 2>&1
PROF="cuda_bench --model /tmp/l8 -q fp8 --kv-cache-dtype fp8 --sections 4 --max-num-batched-tokens 16384 --gpu-memory-utilization 0.95 --swap-space 16GiB --max-num-seqs 1024 --capacity-policy auto --offline-in 2048 --offline-out 128 --offline-requests 120 --profile-ops"
for run in f_1: u_1:--unfused-q-rope f_2: u_2:--unfused-q-rope; do
  name=${run%%:*}; flag=${run#*:}
  $R $PROF $flag --json $O/ops$name.json > $O/ops$name.txt 2>&1
done
OFF="kiln bench offline /tmp/l8 --gpu-memory-utilization 0.95 --max-num-batched-tokens 16384 --swap-space 16GiB -q fp8 --kv-cache-dtype fp8 --dataset random --warmup 8 --input-len 2048 --output-len 128 --num-requests 3000"
for run in f_1: u_1:--unfused-q-rope; do
  name=${run%%:*}; flag=${run#*:}
  $R $OFF $flag --json $O/off$name.json > $O/off$name.txt 2>&1
done
cat $O/rc.txt
grep -H "Output token throughput" $O/off*.txt
cd $OUT && tar -cJf r.tar.xz r && rm -rf r
