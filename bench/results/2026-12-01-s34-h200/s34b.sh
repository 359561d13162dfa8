#!/bin/bash
# Session 34 call B (H200, ff7a5d6's code): W4A16 batch-1 decode (kiln build --quant w4a16-rtn
# --quantize-lm-head, group 128, GEMMs tuned on this GPU) against call A's bf16 figure; two more
# FP8 offline 2048/128 x 3,000 runs for the mean of three.
cd /tmp && tar -xJf "$OLDPWD/.gpu/a.tar.xz" -C /tmp
R=/tmp/call-B; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt; tar -cJf $OUT/r.tar.xz -C /tmp call-B; }
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,driver_version --format=csv > $R/gpu.txt
timeout 100 /tmp/a/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
timeout 200 /tmp/a/run kiln build /tmp/l8 --out /tmp/w4 --quant w4a16-rtn --quantize-lm-head > $R/build-w4.txt 2>&1; echo "build rc $?"; tail -2 $R/build-w4.txt
L="--batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1"
timeout 90 /tmp/a/run kiln bench latency /tmp/w4 $L --json $R/lat-w4.json > $R/lat-w4.txt 2>&1; echo "lat w4 rc $?"; grep "decode step" $R/lat-w4.txt
save; rm -rf /tmp/w4
B="--gpu-memory-utilization 0.95 --max-num-batched-tokens 16384 --swap-space 16GiB -q fp8 --kv-cache-dtype fp8 --dataset random --warmup 8"
for i in 2 3; do
  timeout 150 /tmp/a/run kiln bench offline /tmp/l8 $B --input-len 2048 --output-len 128 --num-requests 3000 --json $R/off2048-$i.json > $R/off2048-$i.txt 2>&1; echo "off2048-$i rc $?"; grep "Output token throughput" $R/off2048-$i.txt; save
done
