#!/usr/bin/env bash
# s23d: the committed build (WithDivisor moved into kernels/divide.h): GPU tests again, and the
# 128/128 offline row.
tar -xJf .gpu/s23d.tar.xz -C /tmp; R=/tmp/s23d/run; O=$OUT/s23d; mkdir -p $O/json
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
t0=$(date +%s)
for t in divide_test quant_test elementwise_test; do timeout 100 $R $t > $O/$t.txt 2>&1; echo "rc=$?" >> $O/$t.txt; done
echo "tests done $(( $(date +%s) - t0 )) s" >> $O/gpu.txt
[ -d /tmp/l8 ] || timeout 100 $R kiln synth --preset llama-3.1-8b --out /tmp/l8 > /dev/null 2>&1
timeout 170 $R kiln bench offline /tmp/l8 --gpu-memory-utilization 0.95 --max-num-batched-tokens 16384 --swap-space 16GiB -q fp8 --kv-cache-dtype fp8 --dataset random --warmup 8 --input-len 128 --output-len 128 --num-requests 4000 --json $O/json/final-128.json > $O/final-128.txt 2>&1
echo "rc=$? all done $(( $(date +%s) - t0 )) s" >> $O/gpu.txt
cd $O && tar -cf json.tar json && rm -rf json
