#!/bin/bash
# Session 39 call A (H200): the streamed one-row W4A16 GEMV (W4GemvStreamKernel) against the
# k-split warps (W4GemvKernel): gemm_lowbit_test's W4 cases, gemv_bench --w4 --rows 1 (new build:
# "w4" = streamed, "w4 alt" = k-split warps; v0 = the committed build), and the W4A16 batch-1
# decode step of the synthetic 8B (kiln build --quant w4a16-rtn --quantize-lm-head) with both
# builds, greedy tokens of both, and the bf16 step for the ratio.
cd /tmp && tar -xJf "$OLDPWD/.gpu/a.tar.xz" -C /tmp
R=/tmp/call-A; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt; tar -cJf $OUT/r.tar.xz -C /tmp call-A; }
nvidia-smi --query-gpu=name,power.limit,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.txt
timeout 200 /tmp/a/run gemm_lowbit_test --gtest_filter='GemmW4Gpu*' > $R/gemm_lowbit_test.txt 2>&1; rc=$?; echo "gemm_lowbit_test rc $rc"; grep -E "PASSED|FAILED|bad|differs" $R/gemm_lowbit_test.txt | head -20
save
for b in gemv_bench gemv_bench_v0; do
  timeout 120 /tmp/a/run $b --w4 --rows 1 --json $R/$b-w4.json > $R/$b-w4.txt 2>&1; echo "$b rc $?"; cat $R/$b-w4.txt | tail -8
done
save
timeout 100 /tmp/a/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
timeout 200 /tmp/a/run kiln build /tmp/l8 --out /tmp/w4 --quant w4a16-rtn --quantize-lm-head > $R/build-w4.txt 2>&1; echo "build rc $?"; tail -1 $R/build-w4.txt
lat() {  # binary name model extra...
  local b=$1 n=$2 m=$3; shift 3
  timeout 90 /tmp/a/run $b bench latency $m --batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1 "$@" --json $R/lat-$n.json > $R/lat-$n.txt 2>&1
  echo "lat $n rc $? $(python3 -c "import json;d=json.load(open('$R/lat-$n.json'))['decode_step_ms'];print(d['mean'], d.get('p50'))" 2>/dev/null)"
}
lat kiln w4-new-1 /tmp/w4
lat kiln_v0 w4-v0-1 /tmp/w4
lat kiln w4-new-2 /tmp/w4
lat kiln_v0 w4-v0-2 /tmp/w4
save
for b in kiln kiln_v0; do
  timeout 60 /tmp/a/run $b generate /tmp/w4 --prompt "The quick brown fox" --max-tokens 32 --logprobs 1 --output jsonl 2>/dev/null > $R/gen-$b.txt; echo "gen $b rc $?"
done
cmp $R/gen-kiln_v0.txt $R/gen-kiln.txt && echo "generate: the same output"
save
lat kiln bf16 /tmp/l8
save
