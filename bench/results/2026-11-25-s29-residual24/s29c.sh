#!/usr/bin/env bash
# s29 call C: offline FP8 2048/128 x 3000, --fp32-residual vs 24-bit stream, alternating, with step logs.
set -x
mkdir -p $OUT/r; O=$OUT/r
[ -d /tmp/s29a ] || tar -xJf .gpu/s29a.tar.xz -C /tmp
R=/tmp/s29a/run
[ -d /tmp/l8 ] || $R kiln synth --preset llama-3.1-8b --out /tmp/l8 > $O/synth.txt 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv,nounits -lms 200 > $O/smi.csv 2>$O/smi.err &
SMI=$!
mark() { echo "$(date +%s.%N) $*" >> $O/marks.txt; }
OFF="kiln bench offline /tmp/l8 --gpu-memory-utilization 0.95 --max-num-batched-tokens 16384 --swap-space 16GiB -q fp8 --kv-cache-dtype fp8 --dataset random --warmup 8 --input-len 2048 --output-len 128 --num-requests 3000"
for run in 32_2:--fp32-residual 24_2: 32_3:--fp32-residual 24_3:; do
  name=${run%%:*}; flag=${run#*:}
  mark off$name
  $R $OFF $flag --json $O/off$name.json --step-log $O/steps$name.jsonl > $O/off$name.txt 2>&1
done
mark end
kill $SMI
grep -H "Output token throughput\|steps with prompt\|Engine:" $O/off*.txt
cd $OUT && tar -cJf r.tar.xz r && rm -rf r
