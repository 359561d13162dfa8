#!/bin/bash
# Session 39 call C (H200): the committed form of the streamed one-row W4A16 GEMV. gemm_lowbit_test
# (all of it); gemv_bench --w4 --rows 1,2 ("w4" the default, "w4 alt" at 1 row the k-split warps)
# and the same with __launch_bounds__(256, 3) (gemv_bench_mb3); the W4A16 batch-1 decode step
# against the committed build (kiln_v0), greedy tokens; ncu of the gate_up launch.
cd /tmp && tar -xJf "$OLDPWD/.gpu/c.tar.xz" -C /tmp
R=/tmp/call-C; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt; tar -cJf $OUT/r.tar.xz -C /tmp call-C; }
nvidia-smi --query-gpu=name,power.limit,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.txt
timeout 240 /tmp/c/run gemm_lowbit_test > $R/gemm_lowbit_test.txt 2>&1; echo "gemm_lowbit_test rc $?"; grep -E "PASSED|FAILED" $R/gemm_lowbit_test.txt | head -5
timeout 150 /tmp/c/run gemv_bench --w4 --rows 1,2 --json $R/gemv-w4.json > $R/gemv-w4.txt 2>&1; echo "gemv_bench rc $?"; tail -10 $R/gemv-w4.txt
timeout 120 /tmp/c/run gemv_bench_mb3 --w4 --rows 1 --json $R/gemv-w4-mb3.json > $R/gemv-w4-mb3.txt 2>&1; echo "gemv_bench_mb3 rc $?"; tail -6 $R/gemv-w4-mb3.txt
save
timeout 100 /tmp/c/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
timeout 200 /tmp/c/run kiln build /tmp/l8 --out /tmp/w4 --quant w4a16-rtn --quantize-lm-head > $R/build-w4.txt 2>&1; echo "build rc $?"
lat() {  # binary name batch
  timeout 90 /tmp/c/run $1 bench latency /tmp/w4 --batch-size $3 --input-len 128 --output-len 128 --iterations 3 --warmup 1 --json $R/lat-$2.json > $R/lat-$2.txt 2>&1
  echo "lat $2 rc $? $(python3 -c "import json;d=json.load(open('$R/lat-$2.json'))['decode_step_ms'];print(d['mean'])" 2>/dev/null)"
}
lat kiln w4-new-1 1; lat kiln_v0 w4-v0-1 1; lat kiln w4-new-2 1; lat kiln_v0 w4-v0-2 1
save
for b in kiln kiln_v0; do
  timeout 60 /tmp/c/run $b generate /tmp/w4 --prompt "The quick brown fox" --max-tokens 32 --logprobs 1 --output jsonl 2>/dev/null > $R/gen-$b.txt; echo "gen $b rc $?"
done
cmp $R/gen-kiln_v0.txt $R/gen-kiln.txt && echo "generate: the same output"
save
export LD_LIBRARY_PATH=/tmp/c/lib:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
timeout 150 /usr/local/cuda/bin/ncu --set full -k regex:W4Gemv --launch-skip 400 --launch-count 1 /tmp/c/bin/gemv_bench --w4 --rows 1 > $R/ncu-gate_up.txt 2>&1; echo "ncu rc $?"
grep -E "W4Gemv|Grid Size|DRAM Throughput|Registers Per|Achieved Occupancy|No Eligible|Issued Warp|Duration" $R/ncu-gate_up.txt | head -12
save
