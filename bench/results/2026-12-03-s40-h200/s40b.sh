#!/bin/bash
# Session 40 call B (H200): the residual RMS norm in the streamed W4A16 GEMV's prologue
# (W4GemmArgsT::norm, Gemm::LinearW4Norm; the runner's default at one token, --no-gemv-norm
# for A/B). gemm_lowbit_test's W4 cases (NormInThePrologueGivesTheSameBits new); cuda_engine_test
# W4NormInGemvGivesTheSameBits; gemv_bench --chain --w4 (fused-norm variants); gemv_bench --w4
# --rows 1; the W4A16 batch-1 step with and without the fusion (alternating), without PDL, with
# other L2 hints; cuda_bench --profile-ops of the W4A16 engine.
cd /tmp && tar -xJf "$OLDPWD/.gpu/b.tar.xz" -C /tmp
R=/tmp/call-B; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt; tar -cJf $OUT/r.tar.xz -C /tmp call-B; }
nvidia-smi --query-gpu=name,power.limit,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.txt
timeout 150 /tmp/b/run gemm_lowbit_test --gtest_filter='GemmW4Gpu*' > $R/gemm_lowbit_test.txt 2>&1; echo "gemm_lowbit_test rc $?"; grep -E "^\[  (PASSED|FAILED) |OK \]|FAILED \]" $R/gemm_lowbit_test.txt | head -12
timeout 150 /tmp/b/run cuda_engine_test --gtest_filter='*W4Norm*' > $R/cuda_engine_test.txt 2>&1; echo "cuda_engine_test rc $?"; grep -E "OK \]|FAILED|Failure" $R/cuda_engine_test.txt | head -8
save
timeout 120 /tmp/b/run gemv_bench --chain --w4 --json $R/chain-w4.json > $R/chain-w4.txt 2>&1; echo "chain rc $?"; cat $R/chain-w4.txt
timeout 90 /tmp/b/run gemv_bench --w4 --rows 1 --json $R/gemv-w4.json > $R/gemv-w4.txt 2>&1; echo "gemv_bench rc $?"; grep -E "^qkv|^o |^gate|^down|layer" $R/gemv-w4.txt
save
timeout 60 /tmp/b/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
timeout 170 /tmp/b/run kiln build /tmp/l8 --out /tmp/w4 --quant w4a16-rtn --quantize-lm-head > $R/build-w4.txt 2>&1; echo "build rc $?"
lat() {  # name flags...
  local n=$1; shift
  timeout 60 /tmp/b/run kiln bench latency /tmp/w4 --batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1 "$@" --json $R/lat-$n.json > $R/lat-$n.txt 2>&1
  echo "lat $n rc $? $(python3 -c "import json;d=json.load(open('$R/lat-$n.json'))['decode_step_ms'];print(d['mean'])" 2>/dev/null)"
}
lat fused-1; lat unfused-1 --no-gemv-norm; lat fused-2; lat unfused-2 --no-gemv-norm
lat fused-nopdl --no-pdl; lat fused-l2-0 --l2-prefetch 0; lat fused-l2-8m --l2-prefetch 8MiB; lat fused-l2-16m --l2-prefetch 16MiB
save
for f in "" "--no-gemv-norm"; do
  n=gen${f:+-unfused}
  timeout 40 /tmp/b/run kiln generate /tmp/w4 $f --prompt "The quick brown fox" --max-tokens 32 --logprobs 1 --output jsonl 2>/dev/null > $R/$n.txt; echo "$n rc $?"
done
cmp $R/gen.txt $R/gen-unfused.txt && echo "generate: the same output"
save
timeout 100 /tmp/b/run cuda_bench --model /tmp/w4 --sections 1 --profile-ops --json $R/profile-w4.json > $R/profile-w4.txt 2>&1; echo "profile rc $?"; python3 -c "import json;d=json.load(open('$R/profile-w4.json'))['decode_batch1'];print(d['step_ms'], d['op_ms'])"
save
