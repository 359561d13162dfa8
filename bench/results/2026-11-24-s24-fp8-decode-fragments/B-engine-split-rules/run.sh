#!/usr/bin/env bash
# s24b: new fp8 decode kernel (2 stages) in the engine: balancing splits (bal) vs the one-wave
# rule (wave) vs old (b3a365e); offline FP8 + FP8 KV 1000/1000 and 128/128; engine-like auto.
tar -xJf .gpu/s24b.tar.xz -C /tmp; R=/tmp/s24b/run; O=$OUT/s24b; mkdir -p $O/json
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
t0=$(date +%s)
for v in bal wave; do timeout 60 $R attention_bench_$v --engine-like --auto-splits-only --json $O/json/el-$v.json > /dev/null 2>&1; done
echo "el done $(( $(date +%s) - t0 )) s" >> $O/gpu.txt
timeout 100 $R kiln_old synth --preset llama-3.1-8b --out /tmp/l8 > /dev/null 2>&1
echo "synth done $(( $(date +%s) - t0 )) s" >> $O/gpu.txt
off() { local bin=$1 name=$2 i=$3 o=$4 n=$5; shift 5; echo "== $name" >> $O/off.txt
  timeout 170 $R $bin bench offline /tmp/l8 --gpu-memory-utilization 0.95 --max-num-batched-tokens 16384 --swap-space 16GiB -q fp8 --kv-cache-dtype fp8 --dataset random --warmup 8 --input-len $i --output-len $o --num-requests $n --json $O/json/$name.json "$@" > /tmp/off.log 2>&1
  echo "rc=$? t=$(( $(date +%s) - t0 ))" >> $O/off.txt; grep -i "output tok\|tok/s" /tmp/off.log | head -3 >> $O/off.txt; }
off kiln_wave wave-1000 1000 1000 1000
off kiln_old old-1000 1000 1000 1000
off kiln_bal bal-1000 1000 1000 1000
off kiln_wave wave-128 128 128 4000
off kiln_bal bal-128 128 128 4000
off kiln_old old-128 128 128 4000
echo "all done $(( $(date +%s) - t0 )) s" >> $O/gpu.txt
cd $O && tar -cf json.tar json && rm -rf json
