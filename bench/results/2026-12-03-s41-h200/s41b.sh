#!/bin/bash
# Session 41 call B (H200): the streamed W4A16 GEMV's x staging through cp.async (all of a warp's
# pieces in flight at once, then permuted in place) instead of a 16-byte load a lane at a time
# (one L2 round trip per 32 pieces: 7 before down's first tile). Row tiles whole again (call A's
# split dropped). gemm_lowbit_test W4, cuda_engine_test W4, gemv_bench --w4 --rows 1 and --chain
# --w4, the W4A16 batch-1 step (three runs), its kernel timeline, greedy tokens.
cd /tmp && tar -xJf "$OLDPWD/.gpu/b.tar.xz" -C /tmp
REPO=$OLDPWD
R=/tmp/call-B; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt 2>/dev/null; tar -cJf $OUT/r.tar.xz -C /tmp call-B; }
nvidia-smi --query-gpu=name,power.limit,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.txt
timeout 150 /tmp/b/run gemm_lowbit_test --gtest_filter='GemmW4Gpu*' > $R/gemm_lowbit_test.txt 2>&1; echo "gemm_lowbit_test rc $?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $R/gemm_lowbit_test.txt | head
timeout 60 /tmp/b/run gemv_bench --w4 --rows 1 --json $R/gemv-w4.json > $R/gemv-w4.txt 2>&1; echo "gemv_bench rc $?"; grep -E "^qkv|^o |^gate|^down|layer" $R/gemv-w4.txt
timeout 90 /tmp/b/run gemv_bench --chain --w4 --json $R/chain-w4.json > $R/chain-w4.txt 2>&1; echo "chain rc $?"; grep -E "ms|roofline" $R/chain-w4.txt | head -20
save
timeout 60 /tmp/b/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
timeout 170 /tmp/b/run kiln build /tmp/l8 --out /tmp/w4 --quant w4a16-rtn --quantize-lm-head > $R/build-w4.txt 2>&1; echo "build rc $?"
lat() {  # name model flags...
  local n=$1 m=$2; shift 2
  timeout 90 /tmp/b/run kiln bench latency $m --batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1 "$@" --json $R/lat-$n.json > $R/lat-$n.txt 2>&1
  echo "lat $n rc $? $(python3 -c "import json;d=json.load(open('$R/lat-$n.json'))['decode_step_ms'];print(d['mean'])" 2>/dev/null)"
}
lat w4-1 /tmp/w4; lat w4-2 /tmp/w4; lat w4-3 /tmp/w4
save
timeout 40 /tmp/b/run kiln generate /tmp/w4 --prompt "The quick brown fox" --max-tokens 32 --logprobs 1 --output jsonl 2>/dev/null > $R/gen.txt; echo "gen rc $?"
timeout 120 /tmp/b/run cuda_engine_test --gtest_filter='*W4*' > $R/cuda_engine_test.txt 2>&1; echo "cuda_engine_test rc $?"; grep -E "OK \]|FAILED \]|PASSED" $R/cuda_engine_test.txt | head -12
save
export KILN_TRACE_OUT=/tmp/trace-w4.jsonl
CUDA_INJECTION64_PATH=/tmp/b/bin/libkiln_kernel_trace.so timeout 90 /tmp/b/run kiln bench latency /tmp/w4 --batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1 --json $R/lat-w4-traced.json > $R/lat-w4-traced.txt 2>&1; echo "traced rc $?"
python3 $REPO/bench/kernel_trace_summary.py --trace /tmp/trace-w4.jsonl --skip 20 --json $R/trace-w4-summary.json > $R/trace-w4-summary.txt 2>&1; head -12 $R/trace-w4-summary.txt
python3 $REPO/bench/kernel_trace_summary.py --trace /tmp/trace-w4.jsonl --skip 20 --by-position > $R/trace-w4-positions.txt 2>&1; sed -n 20,30p $R/trace-w4-positions.txt
save
