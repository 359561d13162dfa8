#!/usr/bin/env bash
# s30 call A: kernel and engine tests; cuda_bench --profile-ops with Q rotated in the prefill
# kernel (default, "f") and in RoPE's pass (--unfused-q-rope, "u"), alternating; one offline
# 2048/128 x 3000 run (default).
set -x
mkdir -p $OUT/r; O=$OUT/r
[ -d /tmp/s30a ] || tar -xJf .gpu/s30a.tar.xz -C /tmp
R=/tmp/s30a/run
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,driver_version --format=csv > $O/gpu.txt
$R attention_test > $O/attention_test.txt 2>&1; echo "attention_test rc=$?" >> $O/rc.txt
$R elementwise_test > $O/elementwise_test.txt 2>&1; echo "elementwise_test rc=$?" >> $O/rc.txt
$R cuda_engine_test > $O/cuda_engine_test.txt 2>&1; echo "cuda_engine_test rc=$?" >> $O/rc.txt
[ -d /tmp/l8 ] || $R kiln synth --preset llama-3.1-8b --out /tmp/l8 > $O/synth.txt 2>&1
PROF="cuda_bench --model /tmp/l8 -q fp8 --kv-cache-dtype fp8 --sections 4 --max-num-batched-tokens 16384 --gpu-memory-utilization 0.95 --swap-space 16GiB --max-num-seqs 1024 --capacity-policy auto --offline-in 2048 --offline-out 128 --offline-requests 120 --profile-ops"
for run in f_1: u_1:--unfused-q-rope f_2: u_2:--unfused-q-rope; do
  name=${run%%:*}; flag=${run#*:}
  $R $PROF $flag --json $O/ops$name.json > $O/ops$name.txt 2>&1
done
OFF="kiln bench offline /tmp/l8 --gpu-memory-utilization 0.95 --max-num-batched-tokens 16384 --swap-space 16GiB -q fp8 --kv-cache-dtype fp8 --dataset random --warmup 8 --input-len 2048 --output-len 128 --num-requests 3000"
for run in f_1:; do
  name=${run%%:*}; flag=${run#*:}
  $R $OFF $flag --json $O/off$name.json > $O/off$name.txt 2>&1
done
cat $O/rc.txt
grep -H "Output token throughput" $O/off*.txt
cd $OUT && tar -cJf r.tar.xz r && rm -rf r
