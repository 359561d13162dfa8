#!/bin/bash
# Session 39 call B (H200): the streamed one-row W4A16 GEMV, second form (each warp stages its
# own tiles' x and their sums, no block barrier; a k-step's dequantization next to its mma, no
# spills), and the same through shared memory (W4GemvBulkKernel: bulk copies into 3 or 4 stages
# a warp, KILN_W4_BULK=3/4). gemm_lowbit_test's W4 cases on both; gemv_bench --w4 --rows 1
# ("w4" streamed, "w4 alt" the k-split warps) for each; ncu of gate_up; then the W4A16 batch-1
# decode step of the best form against the committed build.
cd /tmp && tar -xJf "$OLDPWD/.gpu/b.tar.xz" -C /tmp
R=/tmp/call-B; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt; tar -cJf $OUT/r.tar.xz -C /tmp call-B; }
nvidia-smi --query-gpu=name,power.limit,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.txt
timeout 200 /tmp/b/run gemm_lowbit_test --gtest_filter='GemmW4Gpu*' > $R/gemm_lowbit_test.txt 2>&1; echo "gemm_lowbit_test rc $?"; grep -E "PASSED|FAILED" $R/gemm_lowbit_test.txt | head -5
KILN_W4_BULK=4 timeout 200 /tmp/b/run gemm_lowbit_test --gtest_filter='GemmW4Gpu*' > $R/gemm_lowbit_test-bulk.txt 2>&1; echo "gemm_lowbit_test bulk rc $?"; grep -E "PASSED|FAILED" $R/gemm_lowbit_test-bulk.txt | head -5
save
for v in 0 4 3; do
  if [ $v = 0 ]; then unset KILN_W4_BULK; else export KILN_W4_BULK=$v; fi
  timeout 120 /tmp/b/run gemv_bench --w4 --rows 1 --json $R/gemv-w4-bulk$v.json > $R/gemv-w4-bulk$v.txt 2>&1; echo "gemv_bench bulk=$v rc $?"; tail -6 $R/gemv-w4-bulk$v.txt
done
unset KILN_W4_BULK
save
best=$(python3 -c "
import json
best=None
for v in (0,4,3):
  try: d=json.load(open('$R/gemv-w4-bulk%d.json'%v))
  except Exception: continue
  rows=[r for r in d['lowbit'] if r.get('m')==1]
  a=sum(r['w4_us'] for r in rows); b=sum(r['w4_other_us'] for r in rows)
  if best is None or a<best[1]: best=(v,a,b)
print(*best)")
echo "best form (bulk stages, us, k-split us): $best"
bv=${best%% *}
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
if [ -n "$NCU" ]; then
  for v in 0 $bv; do
    if [ $v = 0 ]; then unset KILN_W4_BULK; else export KILN_W4_BULK=$v; fi
    timeout 150 /tmp/b/run $NCU --set full -k regex:W4Gemv --launch-skip 400 --launch-count 1 /tmp/b/bin/gemv_bench --w4 --rows 1 > $R/ncu-gate_up-bulk$v.txt 2>&1; echo "ncu bulk=$v rc $?"
    grep -E "W4Gemv|Grid Size|DRAM Throughput|Registers Per|Achieved Occupancy|No Eligible|Issued Warp|Duration" $R/ncu-gate_up-bulk$v.txt | head -12
  done
  unset KILN_W4_BULK
fi
save
if [ "$bv" != 0 ]; then export KILN_W4_BULK=$bv; fi
timeout 100 /tmp/b/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
timeout 200 /tmp/b/run kiln build /tmp/l8 --out /tmp/w4 --quant w4a16-rtn --quantize-lm-head > $R/build-w4.txt 2>&1; echo "build rc $?"
lat() {  # binary name
  timeout 90 /tmp/b/run $1 bench latency /tmp/w4 --batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1 --json $R/lat-$2.json > $R/lat-$2.txt 2>&1
  echo "lat $2 rc $? $(python3 -c "import json;d=json.load(open('$R/lat-$2.json'))['decode_step_ms'];print(d['mean'])" 2>/dev/null)"
}
lat kiln w4-new-1; lat kiln_v0 w4-v0-1; lat kiln w4-new-2; lat kiln_v0 w4-v0-2
for b in kiln kiln_v0; do
  timeout 60 /tmp/b/run $b generate /tmp/w4 --prompt "The quick brown fox" --max-tokens 32 --logprobs 1 --output jsonl 2>/dev/null > $R/gen-$b.txt; echo "gen $b rc $?"
done
cmp $R/gen-kiln_v0.txt $R/gen-kiln.txt && echo "generate: the same output"
save
