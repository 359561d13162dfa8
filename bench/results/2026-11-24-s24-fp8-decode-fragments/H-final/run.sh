#!/usr/bin/env bash
# s24h: final build (the fp8 kernel's split rule reads the occupancy of the variant it launches):
# GPU tests, engine-like sweep, offline FP8 + FP8 KV at the three shapes.
tar -xJf .gpu/s24h.tar.xz -C /tmp; R=/tmp/s24h/run; O=$OUT/s24h; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
t0=$(date +%s)
timeout 150 $R attention_test > $O/attention_test.txt 2>&1; echo "rc=$?" >> $O/attention_test.txt
tail -3 $O/attention_test.txt >> $O/gpu.txt
timeout 100 $R cuda_engine_test > $O/cuda_engine_test.txt 2>&1; echo "rc=$?" >> $O/cuda_engine_test.txt
tail -3 $O/cuda_engine_test.txt >> $O/gpu.txt
timeout 60 $R attention_bench --engine-like --json $O/el.json > $O/el.txt 2>&1
timeout 100 $R kiln synth --preset llama-3.1-8b --out /tmp/l8 > /dev/null 2>&1
off() { local name=$1 i=$2 o=$3 n=$4; echo "== $name" >> $O/off.txt
  timeout 170 $R kiln bench offline /tmp/l8 --gpu-memory-utilization 0.95 --max-num-batched-tokens 16384 --swap-space 16GiB -q fp8 --kv-cache-dtype fp8 --dataset random --warmup 8 --input-len $i --output-len $o --num-requests $n --json $O/$name.json > /tmp/off.log 2>&1
  echo "rc=$? t=$(( $(date +%s) - t0 ))" >> $O/off.txt; grep -i "output token throughput" /tmp/off.log >> $O/off.txt; }
off new-1000 1000 1000 1000
off new-128 128 128 4000
off new-2048 2048 128 500
echo "done $(( $(date +%s) - t0 )) s" >> $O/gpu.txt
