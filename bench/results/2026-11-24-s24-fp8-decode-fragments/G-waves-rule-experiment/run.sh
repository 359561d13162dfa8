#!/usr/bin/env bash
# s24g (experiment, not committed): a waves-aware split rule (fewest splits s in 1..4 minimizing
# ceil(items s / slots) / s by >= 10 % once a batch is past one wave) against the committed
# one-wave rule: engine-like sweep with equal-length shapes, 600-request 1000/1000 decode steps,
# offline 1000/1000 var vs committed.
tar -xJf .gpu/s24g.tar.xz -C /tmp; R=/tmp/s24g/run; O=$OUT/s24g; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
t0=$(date +%s)
timeout 100 $R attention_bench_var --engine-like --json $O/el-var.json > $O/el-var.txt 2>&1
timeout 100 $R kiln synth --preset llama-3.1-8b --out /tmp/l8 > /dev/null 2>&1
timeout 250 $R cuda_bench_var --model /tmp/l8 -q fp8 --kv-cache-dtype fp8 --sections 4 --max-num-batched-tokens 16384 --gpu-memory-utilization 0.95 --swap-space 16GiB --max-num-seqs 1024 --capacity-policy auto --json $O/g600-var.json --offline-in 1000 --offline-out 1000 --offline-requests 600 > /dev/null 2>&1
echo "g600 rc=$? t=$(( $(date +%s) - t0 ))" >> $O/gpu.txt; grep -A3 '"steps"' $O/g600-var.json >> $O/gpu.txt
off() { local bin=$1 name=$2; echo "== $name" >> $O/off.txt
  timeout 170 $R $bin bench offline /tmp/l8 --gpu-memory-utilization 0.95 --max-num-batched-tokens 16384 --swap-space 16GiB -q fp8 --kv-cache-dtype fp8 --dataset random --warmup 8 --input-len 1000 --output-len 1000 --num-requests 1000 --json $O/$name.json > /tmp/off.log 2>&1
  echo "rc=$? t=$(( $(date +%s) - t0 ))" >> $O/off.txt; grep -i "output token throughput" /tmp/off.log >> $O/off.txt; }
off kiln_var var-1000
off kiln base-1000
echo "done $(( $(date +%s) - t0 )) s" >> $O/gpu.txt
