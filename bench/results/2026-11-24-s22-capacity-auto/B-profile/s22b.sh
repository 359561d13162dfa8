#!/usr/bin/env bash
# s22b: where the time of the 128/128 and 1000/1000 rows goes at the new defaults (1024 seats,
# auto): cuda_bench --profile-ops (device time per op, decode-only and mixed steps) and the same
# runs unprofiled (graphs) for the real step time.
tar -xJf .gpu/s22b.tar.xz -C /tmp; R=/tmp/s22b/run; O=$OUT/s22b; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
t0=$(date +%s)
timeout 100 $R kiln synth --preset llama-3.1-8b --out /tmp/l8 > /dev/null 2>&1
cb() { local name=$1; shift; echo "== $name" >> $O/cb.txt
  timeout 200 $R cuda_bench --model /tmp/l8 -q fp8 --kv-cache-dtype fp8 --sections 4 --max-num-batched-tokens 16384 --gpu-memory-utilization 0.95 --swap-space 16GiB --max-num-seqs 1024 --capacity-policy auto --json $O/$name.json "$@" > /tmp/cb.log 2>&1
  echo "rc=$? t=$(( $(date +%s) - t0 ))" >> $O/cb.txt; tail -30 /tmp/cb.log >> $O/cb.txt; }
cb p128 --profile-ops --offline-in 128 --offline-out 128 --offline-requests 2048
cb g128 --offline-in 128 --offline-out 128 --offline-requests 2048
cb p1000 --profile-ops --offline-in 1000 --offline-out 1000 --offline-requests 600
cb g1000 --offline-in 1000 --offline-out 1000 --offline-requests 600
echo "done $(( $(date +%s) - t0 )) s" >> $O/gpu.txt
