#!/usr/bin/env bash
# s22a: capacity policy auto + automatic max_num_seqs: cuda_engine_test, then offline FP8 + FP8 KV
# at the default engine options (new: 1024 seats on the H100, auto policy; old = 21ab836: 256 seats,
# max_utilization), same call.
tar -xJf .gpu/s22a.tar.xz -C /tmp; R=/tmp/s22a/run; O=$OUT/s22a; mkdir -p $O/json
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
t0=$(date +%s)
timeout 220 $R cuda_engine_test > $O/tests.txt 2>&1; echo "rc=$?" >> $O/tests.txt
echo "tests done $(( $(date +%s) - t0 )) s" >> $O/gpu.txt
timeout 100 $R kiln synth --preset llama-3.1-8b --out /tmp/l8 > /dev/null 2>&1
echo "synth done $(( $(date +%s) - t0 )) s" >> $O/gpu.txt
off() { local bin=$1 name=$2 i=$3 o=$4 n=$5; shift 5; echo "== $name" >> $O/off.txt
  timeout 170 $R $bin bench offline /tmp/l8 --gpu-memory-utilization 0.95 --max-num-batched-tokens 16384 --swap-space 16GiB -q fp8 --kv-cache-dtype fp8 --dataset random --warmup 8 --input-len $i --output-len $o --num-requests $n --json $O/json/$name.json "$@" > /tmp/off.log 2>&1
  echo "rc=$? t=$(( $(date +%s) - t0 ))" >> $O/off.txt; tail -22 /tmp/off.log >> $O/off.txt; }
off kiln new-128 128 128 4000
off kiln_old old-128 128 128 4000
off kiln new-1000 1000 1000 1000
off kiln_old old-1000 1000 1000 1000
[ $(( $(date +%s) - t0 )) -lt 420 ] && off kiln new-2048 2048 128 500
cd $O && tar -cf json.tar json && rm -rf json
