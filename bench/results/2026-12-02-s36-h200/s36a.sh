#!/bin/bash
# Session 36 call A: the persistent W8A16 GEMV (GemvW8ArgsT::persistent) on an H200.
# gemv_bench --chain (persistent and not, in one process) for two builds: __launch_bounds__
# (256, 5) at one row (48 registers, small spills: 5 blocks an SM) and without (56: 4 blocks);
# then batch-1 decode of the synthetic Llama-3.1-8B in FP8 with and without it (the first
# build), alternating, two rounds, bf16 and fp8 KV. Tests run in call B.
cd /tmp && tar -xJf "$OLDPWD/.gpu/a.tar.xz" -C /tmp
R=/tmp/call-A; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt; tar -cJf $OUT/r.tar.xz -C /tmp call-A; }
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,clocks.max.mem,driver_version,memory.total --format=csv > $R/gpu.txt; cat $R/gpu.txt
i=0
for b in gemv_bench gemv_bench_nolb gemv_bench; do
  i=$((i+1)); timeout 100 /tmp/a/run $b --chain --json $R/chain$i-$b.json > $R/chain$i-$b.txt 2>&1; echo "$b chain rc $?"; cat $R/chain$i-$b.txt
done
save
timeout 100 /tmp/a/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
for v in "pers:" "nopers:--no-gemv-persistent"; do  # the same bits: the same greedy tokens
  timeout 60 /tmp/a/run kiln generate /tmp/l8 -q fp8 ${v#*:} --prompt "The quick brown fox" --max-tokens 24 --output jsonl > $R/gen-${v%%:*}.txt 2>&1; echo "gen ${v%%:*} rc $?"
done
cmp $R/gen-pers.txt $R/gen-nopers.txt && echo "generate: same output"
L="--batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1"
for round in 1 2; do
  for v in "pers:" "nopers:--no-gemv-persistent" "kv8-pers:--kv-cache-dtype fp8" "kv8-nopers:--kv-cache-dtype fp8 --no-gemv-persistent"; do
    n=${v%%:*}-r$round; a=${v#*:}
    timeout 90 /tmp/a/run kiln bench latency /tmp/l8 -q fp8 $a $L --json $R/lat-$n.json > $R/lat-$n.txt 2>&1; echo "lat $n rc $?"; grep "decode step" $R/lat-$n.txt
  done
  save
done
