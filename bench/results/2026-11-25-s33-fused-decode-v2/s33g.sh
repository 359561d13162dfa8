#!/bin/bash
# Session 33 call G (the committed code, with the runner's --fused-decode warnings): the fused
# engine test; `kiln generate --fused-decode` on a synthetic Llama-3.1-8B cut to 2 layers in
# bf16 (warns: not FP8) and in FP8 (taken, no warning).
cd /tmp && tar -xJf "$OLDPWD/.gpu/g.tar.xz" -C /tmp
R=$OUT/call-G; mkdir -p $R
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,driver_version --format=csv > $R/gpu.txt
timeout 240 /tmp/g/run cuda_engine_test --gtest_filter='*FusedDecode*' > $R/fused_test.txt 2>&1; echo "fused test rc $?"
grep -E "PASSED|FAILED|fused vs" $R/fused_test.txt
timeout 120 /tmp/g/run kiln synth --preset llama-3.1-8b --num-layers 2 --out /tmp/l2 > $R/synth.txt 2>&1; echo "synth rc $?"
G="--prompt hello --max-tokens 8 --temperature 0"
for v in "bf16:" "fp8:-q fp8"; do
  n=${v%%:*}; a=${v#*:}
  timeout 120 /tmp/g/run kiln generate /tmp/l2 $a --fused-decode $G > $R/gen-$n.txt 2>&1; echo "gen $n rc $?"; grep -i "fused-decode\|error" $R/gen-$n.txt | head -3
done
sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt
cd $OUT && tar -cJf r.tar.xz call-G && rm -rf call-G
