#!/usr/bin/env bash
# s24f: the committed build's 1000/1000 decode steps unprofiled (600 requests, as session 22's
# g1000) and profiled at the benchmark's 1,000 requests (mean decode batch ~496).
tar -xJf .gpu/s24f.tar.xz -C /tmp; R=/tmp/s24f/run; O=$OUT/s24f; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
t0=$(date +%s)
timeout 100 $R kiln synth --preset llama-3.1-8b --out /tmp/l8 > /dev/null 2>&1
cb() { local name=$1; shift; echo "== $name" >> $O/cb.txt
  timeout 250 $R cuda_bench --model /tmp/l8 -q fp8 --kv-cache-dtype fp8 --sections 4 --max-num-batched-tokens 16384 --gpu-memory-utilization 0.95 --swap-space 16GiB --max-num-seqs 1024 --capacity-policy auto --json $O/$name.json "$@" > /tmp/cb.log 2>&1
  echo "rc=$? t=$(( $(date +%s) - t0 ))" >> $O/cb.txt; grep -A8 '"steps"' $O/$name.json >> $O/cb.txt; }
cb g600 --offline-in 1000 --offline-out 1000 --offline-requests 600
cb p1000 --profile-ops --offline-in 1000 --offline-out 1000 --offline-requests 1000
echo "done $(( $(date +%s) - t0 )) s" >> $O/gpu.txt
