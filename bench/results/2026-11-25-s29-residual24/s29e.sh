#!/usr/bin/env bash
# s29 call E: FP8 path vs the CPU reference on the real default model; offline 128/128, 1000/1000; batch-1 latency; one more 2048/128 pair.
set -x
mkdir -p $OUT/r; O=$OUT/r
[ -d /tmp/s29a ] || tar -xJf .gpu/s29a.tar.xz -C /tmp
R=/tmp/s29a/run
[ -d /tmp/l8 ] || $R kiln synth --preset llama-3.1-8b --out /tmp/l8 > $O/synth.txt 2>&1
mark() { echo "$(date +%s.%N) $*" >> $O/marks.txt; }
mark check
python3 scripts/gpu/check_cuda.py --kiln "$R kiln" --model /tmp/smol.gguf --vocab 49152 --dtype bfloat16 --quantization fp8 --json $O/check_fp8_bf16.json > $O/check_fp8_bf16.txt 2>&1; echo "check rc=$?" >> $O/rc.txt
tail -15 $O/check_fp8_bf16.txt
OFF="kiln bench offline /tmp/l8 --gpu-memory-utilization 0.95 --max-num-batched-tokens 16384 --swap-space 16GiB -q fp8 --kv-cache-dtype fp8 --dataset random --warmup 8"
mark off128
$R $OFF --input-len 128 --output-len 128 --num-requests 4000 --json $O/off128.json > $O/off128.txt 2>&1
mark off1000
$R $OFF --input-len 1000 --output-len 1000 --num-requests 1000 --json $O/off1000.json > $O/off1000.txt 2>&1
mark lat
$R kiln bench latency /tmp/l8 -q fp8 --kv-cache-dtype fp8 --batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1 --json $O/lat1.json > $O/lat1.txt 2>&1
mark off24_4
$R $OFF --input-len 2048 --output-len 128 --num-requests 3000 --json $O/off24_4.json --step-log $O/steps24_4.jsonl > $O/off24_4.txt 2>&1
mark off32_4
$R $OFF --input-len 2048 --output-len 128 --num-requests 3000 --fp32-residual --json $O/off32_4.json --step-log $O/steps32_4.jsonl > $O/off32_4.txt 2>&1
mark end
grep -H "Output token throughput\|steps with prompt" $O/off*.txt; grep -i "p50\|median\|decode step" $O/lat1.txt | head -5
cd $OUT && tar -cJf r.tar.xz r && rm -rf r
