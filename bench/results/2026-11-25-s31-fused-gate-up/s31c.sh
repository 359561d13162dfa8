#!/bin/bash
# Session 31 call C: gate_up_bench (accuracy against exact sums, timings); offline 2048/128 x 3,000
# with the fused gate_up (default) and --no-fused-gate-up.
cd /tmp && tar -xJf "$OLDPWD/.gpu/c.tar.xz" -C /tmp
R=$OUT/call-C; mkdir -p $R
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,driver_version --format=csv > $R/gpu.txt
timeout 100 /tmp/c/run gate_up_bench --rows 15360 --seconds 2 --json $R/bench.json > $R/bench.txt 2>&1; echo "bench rc $?" >> $R/bench.txt
cat $R/bench.txt
timeout 200 /tmp/c/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
O="--gpu-memory-utilization 0.95 --max-num-batched-tokens 16384 --swap-space 16GiB -q fp8 --kv-cache-dtype fp8 --dataset random --warmup 8 --input-len 2048 --output-len 128 --num-requests 3000"
timeout 200 /tmp/c/run kiln bench offline /tmp/l8 $O --json $R/off-f.json > $R/off-f.txt 2>&1; echo "f rc $?"; grep "Output token throughput" $R/off-f.txt | head -3
timeout 200 /tmp/c/run kiln bench offline /tmp/l8 $O --no-fused-gate-up --json $R/off-u.json > $R/off-u.txt 2>&1; echo "u rc $?"; grep "Output token throughput" $R/off-u.txt | head -3
