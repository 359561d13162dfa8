#!/bin/bash
# Session 34 call A, the first run of issue 8's targets on an H200 (ff7a5d6's code): the fused
# decode engine test; copy bandwidth and the kernel alone (decode_fused_bench); batch-1 decode of
# the synthetic Llama-3.1-8B in bf16 and FP8 (per-op and --fused-decode, bf16 and fp8 KV; the L2 prefetch at 0 and 8 MiB against the default 4); FP8
# offline 128/128 x 4,000, 1000/1000 x 1,000 and 2048/128 x 3,000 as in session 31.
cd /tmp && tar -xJf "$OLDPWD/.gpu/a.tar.xz" -C /tmp
R=/tmp/call-A; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt; tar -cJf $OUT/r.tar.xz -C /tmp call-A; }
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,clocks.max.mem,driver_version,memory.total --format=csv > $R/gpu.txt; cat $R/gpu.txt
timeout 120 /tmp/a/run cuda_engine_test --gtest_filter='*FusedDecode*' > $R/fused_test.txt 2>&1; echo "fused test rc $?"
grep -E "PASSED|FAILED|fused vs" $R/fused_test.txt | head
timeout 40 /tmp/a/run decode_fused_bench --context 256 --json $R/bench-256.json > $R/bench-256.txt 2>&1; echo "bench rc $?"; cat $R/bench-256.txt
timeout 100 /tmp/a/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
save
L="--batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1"
for v in "bf16:" "u:-q fp8" "f:-q fp8 --fused-decode" "u8:-q fp8 --kv-cache-dtype fp8" "f8:-q fp8 --kv-cache-dtype fp8 --fused-decode" "u-l2p0:-q fp8 --l2-prefetch 0" "u-l2p8:-q fp8 --l2-prefetch 8MiB"; do
  n=${v%%:*}; a=${v#*:}
  timeout 90 /tmp/a/run kiln bench latency /tmp/l8 $a $L --json $R/lat-$n.json > $R/lat-$n.txt 2>&1; echo "lat $n rc $?"; grep "decode step" $R/lat-$n.txt
done
save
B="--gpu-memory-utilization 0.95 --max-num-batched-tokens 16384 --swap-space 16GiB -q fp8 --kv-cache-dtype fp8 --dataset random --warmup 8"
off() { local n=$1; shift; timeout 170 /tmp/a/run kiln bench offline /tmp/l8 $B "$@" --json $R/$n.json > $R/$n.txt 2>&1; echo "$n rc $?"; grep -E "KV cache:|Output token throughput" $R/$n.txt; save; }
off off128 --input-len 128 --output-len 128 --num-requests 4000
off off1000 --input-len 1000 --output-len 1000 --num-requests 1000
off off2048 --input-len 2048 --output-len 128 --num-requests 3000
