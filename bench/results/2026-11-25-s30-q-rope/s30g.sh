#!/usr/bin/env bash
# s30 call G: the committed build (RoPE's sincos as before the session): the kernel and engine
# tests, then offline 2048/128 x 3000 with --no-rope-q-codes ("t") then the default ("c").
set -x
mkdir -p $OUT/r; O=$OUT/r
[ -d /tmp/s30g ] || tar -xJf .gpu/s30g.tar.xz -C /tmp
R=/tmp/s30g/run
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,driver_version --format=csv > $O/gpu.txt
$R attention_test > $O/attention_test.txt 2>&1; echo "attention_test rc=$?" >> $O/rc.txt
$R elementwise_test > $O/elementwise_test.txt 2>&1; echo "elementwise_test rc=$?" >> $O/rc.txt
$R cuda_engine_test > $O/cuda_engine_test.txt 2>&1; echo "cuda_engine_test rc=$?" >> $O/rc.txt
[ -d /tmp/l8 ] || $R kiln synth --preset llama-3.1-8b --out /tmp/l8 > $O/synth.txt 2>&1
OFF="kiln bench offline /tmp/l8 --gpu-memory-utilization 0.95 --max-num-batched-tokens 16384 --swap-space 16GiB -q fp8 --kv-cache-dtype fp8 --dataset random --warmup 8 --input-len 2048 --output-len 128 --num-requests 3000"
for run in t_2:--no-rope-q-codes c_2:; do
  name=${run%%:*}; flag=${run#*:}
  $R $OFF $flag --json $O/off$name.json > $O/off$name.txt 2>&1
done
cat $O/rc.txt
grep -H "Output token throughput" $O/off*.txt
cd $OUT && tar -cJf r.tar.xz r && rm -rf r
