#!/usr/bin/env bash
# s29 call A: kernel tests, then offline FP8 2048/128 x 3000 with the 24-bit residual stream (default) and --fp32-residual.
set -x
mkdir -p $OUT/r; O=$OUT/r
tar -xJf .gpu/s29a.tar.xz -C /tmp
R=/tmp/s29a/run
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,driver_version --format=csv > $O/gpu.txt
mark() { echo "$(date +%s.%N) $*" >> $O/marks.txt; }
mark tests
$R quant_test > $O/quant_test.txt 2>&1; echo "quant_test rc=$?" >> $O/rc.txt
$R elementwise_test > $O/elementwise_test.txt 2>&1; echo "elementwise_test rc=$?" >> $O/rc.txt
mark synth
$R kiln synth --preset llama-3.1-8b --out /tmp/l8 > $O/synth.txt 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active --format=csv,nounits -lms 200 > $O/smi.csv 2>$O/smi.err &
SMI=$!
OFF="kiln bench offline /tmp/l8 --gpu-memory-utilization 0.95 --max-num-batched-tokens 16384 --swap-space 16GiB -q fp8 --kv-cache-dtype fp8 --dataset random --warmup 8 --input-len 2048 --output-len 128 --num-requests 3000"
mark off24_1
$R $OFF --json $O/off24_1.json > $O/off24_1.txt 2>&1
mark off32_1
$R $OFF --fp32-residual --json $O/off32_1.json > $O/off32_1.txt 2>&1
mark end
kill $SMI
grep -h "output tok/s\|Output" $O/off*.txt | head
cd $OUT && tar -cJf r.tar.xz r && rm -rf r
