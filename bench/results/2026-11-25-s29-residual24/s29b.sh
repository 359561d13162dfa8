#!/usr/bin/env bash
# s29 call B: per-op profile of 2048/128 prompt steps, 24-bit stream vs --fp32-residual, alternating.
set -x
mkdir -p $OUT/r; O=$OUT/r
tar -xJf .gpu/s29b.tar.xz -C /tmp
[ -d /tmp/s29a ] || tar -xJf .gpu/s29a.tar.xz -C /tmp
[ -d /tmp/l8 ] || /tmp/s29a/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $O/synth.txt 2>&1
CB="/tmp/s29b/run cuda_bench --model /tmp/l8 -q fp8 --kv-cache-dtype fp8 --sections 4 --max-num-batched-tokens 16384 --gpu-memory-utilization 0.95 --swap-space 16GiB --max-num-seqs 1024 --capacity-policy auto --offline-in 2048 --offline-out 128 --offline-requests 120 --profile-ops"
$CB --json $O/ops24_1.json > $O/ops24_1.txt 2>&1
$CB --fp32-residual --json $O/ops32_1.json > $O/ops32_1.txt 2>&1
$CB --json $O/ops24_2.json > $O/ops24_2.txt 2>&1
$CB --fp32-residual --json $O/ops32_2.json > $O/ops32_2.txt 2>&1
for f in $O/ops*.json; do python3 -c "
import json,sys; d=json.load(open('$f'))['offline']; m=d['mixed_op_seconds']; n=d['steps']['mixed']
print('$f'.split('/')[-1], ' '.join('%s=%.2f'%(k,1e3*v/n) for k,v in sorted(m.items())), 'total=%.1f'%(1e3*sum(m.values())/n))"; done
cd $OUT && tar -cJf r.tar.xz r && rm -rf r
