#!/usr/bin/env bash
# s29 call H: two more 2048/128 x 3000 pairs on a fresh machine, order 24, 32, 32, 24.
set -x
mkdir -p $OUT/r; O=$OUT/r
[ -d /tmp/s29a ] || tar -xJf .gpu/s29a.tar.xz -C /tmp
R=/tmp/s29a/run
[ -d /tmp/l8 ] || $R kiln synth --preset llama-3.1-8b --out /tmp/l8 > $O/synth.txt 2>&1
OFF="kiln bench offline /tmp/l8 --gpu-memory-utilization 0.95 --max-num-batched-tokens 16384 --swap-space 16GiB -q fp8 --kv-cache-dtype fp8 --dataset random --warmup 8 --input-len 2048 --output-len 128 --num-requests 3000"
for run in 24_5: 32_5:--fp32-residual 32_6:--fp32-residual 24_6:; do
  name=${run%%:*}; flag=${run#*:}
  $R $OFF $flag --json $O/off$name.json > $O/off$name.txt 2>&1
done
grep -H "Output token throughput\|steps with prompt" $O/off*.txt
cd $OUT && tar -cJf r.tar.xz r && rm -rf r
