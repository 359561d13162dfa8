#!/bin/bash
# Session 40 call D (H200): the committed build. The streamed GEMV's own staging restored to the
# session-39 SASS (call B/C's loop cost gate_up and down ~0.45 us each); the L2 hint off ahead of
# W4A16 weights in one-token steps by default. gemm_lowbit_test W4, the whole cuda_engine_test,
# gemv_bench --w4 --rows 1, the W4A16 batch-1 step (default / --no-gemv-norm / --l2-prefetch
# 4MiB, two alternating rounds), the FP8 batch-1 step (default unchanged), greedy tokens.
cd /tmp && tar -xJf "$OLDPWD/.gpu/d.tar.xz" -C /tmp
R=/tmp/call-D; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt; tar -cJf $OUT/r.tar.xz -C /tmp call-D; }
nvidia-smi --query-gpu=name,power.limit,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.txt
timeout 100 /tmp/d/run gemm_lowbit_test --gtest_filter='GemmW4Gpu*' > $R/gemm_lowbit_test.txt 2>&1; echo "gemm_lowbit_test rc $?"; grep -E "^\[  (PASSED|FAILED) " $R/gemm_lowbit_test.txt
timeout 60 /tmp/d/run gemv_bench --w4 --rows 1 --json $R/gemv-w4.json > $R/gemv-w4.txt 2>&1; echo "gemv_bench rc $?"; grep -E "^qkv|^o |^gate|^down|layer" $R/gemv-w4.txt
save
timeout 60 /tmp/d/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
timeout 170 /tmp/d/run kiln build /tmp/l8 --out /tmp/w4 --quant w4a16-rtn --quantize-lm-head > $R/build-w4.txt 2>&1; echo "build rc $?"
lat() {  # name model flags...
  local n=$1 m=$2; shift 2
  timeout 90 /tmp/d/run kiln bench latency $m --batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1 "$@" --json $R/lat-$n.json > $R/lat-$n.txt 2>&1
  echo "lat $n rc $? $(python3 -c "import json;d=json.load(open('$R/lat-$n.json'))['decode_step_ms'];print(d['mean'])" 2>/dev/null)"
}
lat w4-1 /tmp/w4; lat w4-nonorm-1 /tmp/w4 --no-gemv-norm; lat w4-l2-4m-1 /tmp/w4 --l2-prefetch 4MiB
lat w4-2 /tmp/w4; lat w4-nonorm-2 /tmp/w4 --no-gemv-norm; lat w4-l2-4m-2 /tmp/w4 --l2-prefetch 4MiB
save
lat fp8 /tmp/l8 -q fp8
for f in "" "--no-gemv-norm"; do
  n=gen${f:+-unfused}
  timeout 40 /tmp/d/run kiln generate /tmp/w4 $f --prompt "The quick brown fox" --max-tokens 32 --logprobs 1 --output jsonl 2>/dev/null > $R/$n.txt; echo "$n rc $?"
done
python3 -c "
import re
a,b=[re.sub(r'\"[a-z_]*_ms\":[0-9.]+','',open('$R/'+f).read()) for f in ('gen.txt','gen-unfused.txt')]
print('generate: the same tokens and logprobs' if a==b else 'generate: DIFFER')"
save
timeout 150 /tmp/d/run cuda_engine_test > $R/cuda_engine_test.txt 2>&1; echo "cuda_engine_test rc $?"; grep -E "OK \]|FAILED \]|PASSED" $R/cuda_engine_test.txt | head -12
save
