#!/bin/bash
# Session 40 call A (H200): the streamed one-row W4A16 GEMV's wide form (8 slots a lane: a warp's
# whole run of a k = 4,096 row tile in flight, issued before PdlWait; 2 blocks an SM).
# gemm_lowbit_test's W4 cases (kernel 4 forced); gemv_bench --w4 --rows 1 (both forms by name);
# gemv_bench --chain --w4 (new: the 128 W4A16 GEMVs of a step in a graph, per-layer kernel
# choices, with and without the norms and SiluMul); the W4A16 batch-1 step of kiln (default:
# 4 slots everywhere) against kiln_w1 (wide wherever k = 4,096) and kiln_w2 (wide where k = 4,096
# and the row tiles fit one round: o); cuda_bench --profile-ops of the W4A16 engine (per-op
# device time, no graphs); greedy tokens.
cd /tmp && tar -xJf "$OLDPWD/.gpu/a.tar.xz" -C /tmp
R=/tmp/call-A; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt; tar -cJf $OUT/r.tar.xz -C /tmp call-A; }
nvidia-smi --query-gpu=name,power.limit,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.txt
timeout 120 /tmp/a/run gemm_lowbit_test --gtest_filter='GemmW4Gpu*' > $R/gemm_lowbit_test.txt 2>&1; echo "gemm_lowbit_test rc $?"; grep -E "PASSED|FAILED" $R/gemm_lowbit_test.txt | head -5
timeout 120 /tmp/a/run gemv_bench --chain --w4 --json $R/chain-w4.json > $R/chain-w4.txt 2>&1; echo "chain rc $?"; cat $R/chain-w4.txt
timeout 120 /tmp/a/run gemv_bench --w4 --rows 1 --json $R/gemv-w4.json > $R/gemv-w4.txt 2>&1; echo "gemv_bench rc $?"; grep -E "m=1|^qkv|^o |^gate|^down|layer" $R/gemv-w4.txt
save
timeout 60 /tmp/a/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
timeout 170 /tmp/a/run kiln build /tmp/l8 --out /tmp/w4 --quant w4a16-rtn --quantize-lm-head > $R/build-w4.txt 2>&1; echo "build rc $?"
lat() {  # binary name
  timeout 60 /tmp/a/run $1 bench latency /tmp/w4 --batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1 --json $R/lat-$2.json > $R/lat-$2.txt 2>&1
  echo "lat $2 rc $? $(python3 -c "import json;d=json.load(open('$R/lat-$2.json'))['decode_step_ms'];print(d['mean'])" 2>/dev/null)"
}
lat kiln s4-1; lat kiln_w1 w1-1; lat kiln_w2 w2-1; lat kiln s4-2; lat kiln_w1 w1-2; lat kiln_w2 w2-2
save
for b in kiln kiln_w1; do
  timeout 40 /tmp/a/run $b generate /tmp/w4 --prompt "The quick brown fox" --max-tokens 32 --logprobs 1 --output jsonl 2>/dev/null > $R/gen-$b.txt; echo "gen $b rc $?"
done
cmp $R/gen-kiln.txt $R/gen-kiln_w1.txt && echo "generate: the same output"
save
timeout 100 /tmp/a/run cuda_bench --model /tmp/w4 --sections 1 --profile-ops --json $R/profile-w4.json > $R/profile-w4.txt 2>&1; echo "profile rc $?"; tail -30 $R/profile-w4.txt
save
