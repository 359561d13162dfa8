#!/usr/bin/env bash
# s24d: decode graphs up to 512 sequences (kiln_g512) vs the committed 256 (kiln, f1e8e04) at
# offline FP8 1000/1000; per-op profile of the committed build's 1000/1000 decode steps.
tar -xJf .gpu/s24d.tar.xz -C /tmp; R=/tmp/s24d/run; O=$OUT/s24d; mkdir -p $O/json
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
t0=$(date +%s)
timeout 100 $R kiln synth --preset llama-3.1-8b --out /tmp/l8 > /dev/null 2>&1
off() { local bin=$1 name=$2 i=$3 o=$4 n=$5; shift 5; echo "== $name" >> $O/off.txt
  timeout 170 $R $bin bench offline /tmp/l8 --gpu-memory-utilization 0.95 --max-num-batched-tokens 16384 --swap-space 16GiB -q fp8 --kv-cache-dtype fp8 --dataset random --warmup 8 --input-len $i --output-len $o --num-requests $n --json $O/json/$name.json "$@" > /tmp/off-$name.log 2>&1
  echo "rc=$? t=$(( $(date +%s) - t0 ))" >> $O/off.txt; grep -i "output token throughput\|tune\|graph\|ready" /tmp/off-$name.log | head -5 >> $O/off.txt; }
off kiln_g512 g512-1000 1000 1000 1000
off kiln base-1000 1000 1000 1000
timeout 200 $R cuda_bench --model /tmp/l8 -q fp8 --kv-cache-dtype fp8 --sections 4 --max-num-batched-tokens 16384 --gpu-memory-utilization 0.95 --swap-space 16GiB --max-num-seqs 1024 --capacity-policy auto --offline-in 1000 --offline-out 1000 --offline-requests 600 --profile-ops --json $O/json/profile-1000.json > $O/profile-1000.txt 2>&1
echo "rc=$? profile done $(( $(date +%s) - t0 )) s" >> $O/gpu.txt
cd $O && tar -cf json.tar json && rm -rf json
