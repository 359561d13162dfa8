#!/usr/bin/env bash
# s30 call H: the committed build: a third 2048/128 x 3000 pair (c then t), then 128/128 x 4000
# and 1000/1000 x 1000 with the default (c).
set -x
mkdir -p $OUT/r; O=$OUT/r
[ -d /tmp/s30g ] || tar -xJf .gpu/s30g.tar.xz -C /tmp
R=/tmp/s30g/run
[ -d /tmp/l8 ] || $R kiln synth --preset llama-3.1-8b --out /tmp/l8 > $O/synth.txt 2>&1
B="kiln bench offline /tmp/l8 --gpu-memory-utilization 0.95 --max-num-batched-tokens 16384 --swap-space 16GiB -q fp8 --kv-cache-dtype fp8 --dataset random --warmup 8"
$R $B --input-len 2048 --output-len 128 --num-requests 3000 --json $O/offc_3.json > $O/offc_3.txt 2>&1
$R $B --input-len 2048 --output-len 128 --num-requests 3000 --no-rope-q-codes --json $O/offt_3.json > $O/offt_3.txt 2>&1
$R $B --input-len 128 --output-len 128 --num-requests 4000 --json $O/off128.json > $O/off128.txt 2>&1
$R $B --input-len 1000 --output-len 1000 --num-requests 1000 --json $O/off1000.json > $O/off1000.txt 2>&1
grep -H "Output token throughput" $O/off*.txt
cd $OUT && tar -cJf r.tar.xz r && rm -rf r
