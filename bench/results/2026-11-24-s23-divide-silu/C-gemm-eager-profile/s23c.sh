#!/usr/bin/env bash
# s23c: the FP8 GEMMs at eager decode row counts: heuristic / tuned / borrowed from the 128-row
# bucket; then per-op device time of 128/128 decode steps (cuda_bench --profile-ops) with the
# eager buckets (new) and without (a).
tar -xJf .gpu/s23c.tar.xz -C /tmp; R=/tmp/s23c/run; O=$OUT/s23c; mkdir -p $O/json
t0=$(date +%s)
timeout 150 $R gemv_bench --prefill --fp8 --rows 900,960,1000,1006,1024 --json $O/json/gemm-eager.json > $O/gemm-eager.txt 2>&1
echo "gemm done $(( $(date +%s) - t0 )) s" >> $O/gpu.txt
[ -d /tmp/l8 ] || timeout 100 $R kiln synth --preset llama-3.1-8b --out /tmp/l8 > /dev/null 2>&1
ls /tmp/l8 > /dev/null 2>&1 && echo "l8 present" >> $O/gpu.txt
prof() { local bin=$1 name=$2; timeout 150 $R $bin --model /tmp/l8 -q fp8 --kv-cache-dtype fp8 --sections 4 --max-num-batched-tokens 16384 --gpu-memory-utilization 0.95 --swap-space 16GiB --max-num-seqs 1024 --capacity-policy auto --offline-in 128 --offline-out 128 --offline-requests 4000 --profile-ops --json $O/json/$name.json > $O/$name.txt 2>&1; echo "$name rc=$? t=$(( $(date +%s) - t0 ))" >> $O/gpu.txt; }
prof cuda_bench prof-new
prof cuda_bench_a prof-a
cd $O && tar -cf json.tar json && rm -rf json
