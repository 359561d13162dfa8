#!/bin/bash
# Session 38 call B: the W8A16 GEMV with e4m3 codes decoded by integer ops and multiplied on the
# tensor cores (w8_internal::W8Sum, this session's change) against the committed build (v0,
# 540ead9: cvt e4m3x2 -> f16x2, f16 -> f32, FFMA). v1: the committed build with only the
# persistent GEMV's decoding replaced by the integer ops, FFMAs kept (Dot16Bits, experiment
# patch). gemv_bench --chain and --fp8 --rows 1,2,3; decode steps at batch 1 (bf16 / fp8 KV,
# persistent and not), 2 and 3; greedy tokens; quant_test; cuda_engine_test.
cd /tmp && tar -xJf "$OLDPWD/.gpu/b.tar.xz" -C /tmp
R=/tmp/call-B; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt; tar -cJf $OUT/r.tar.xz -C /tmp call-B; }
nvidia-smi --query-gpu=name,power.limit,driver_version,clocks.max.sm --format=csv > $R/gpu.txt
timeout 100 /tmp/b/run quant_test --gtest_filter='*Persistent*:*GemvFp8*' > $R/quant_test-gemv.txt 2>&1; echo "quant_test gemv rc $?"; grep -E "persistent GEMV|PASSED|FAILED" $R/quant_test-gemv.txt | head -12
for r in 1 2; do for b in gemv_bench_v0 gemv_bench_v1 gemv_bench; do
  timeout 60 /tmp/b/run $b --chain --json $R/chain-$b-$r.json > $R/chain-$b-$r.txt 2>&1; echo "$b chain $r rc $?"; sed -n 1,6p $R/chain-$b-$r.txt
done; done
save
timeout 100 /tmp/b/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
lat() {  # name binary extra...
  local n=$1 b=$2; shift 2
  timeout 90 /tmp/b/run $b bench latency /tmp/l8 -q fp8 --input-len 128 --output-len 128 --iterations 3 --warmup 1 "$@" --json $R/lat-$n.json > $R/lat-$n.txt 2>&1
  echo "lat $n rc $? $(python3 -c "import json;print(json.load(open('$R/lat-$n.json'))['decode_step_ms']['mean'])" 2>/dev/null)"
}
for r in 1 2; do lat b1-v0-$r kiln_v0 --batch-size 1; lat b1-new-$r kiln --batch-size 1; done
lat b1-kv8-v0 kiln_v0 --batch-size 1 --kv-cache-dtype fp8; lat b1-kv8-new kiln --batch-size 1 --kv-cache-dtype fp8
save
for b in kiln_v0 kiln; do
  timeout 60 /tmp/b/run $b generate /tmp/l8 -q fp8 --prompt "The quick brown fox" --max-tokens 32 --logprobs 1 --output jsonl 2>/dev/null > $R/gen-$b.txt; echo "gen $b rc $?"
done
cmp $R/gen-kiln_v0.txt $R/gen-kiln.txt && echo "generate: the same output"
python3 - $R/gen-kiln_v0.txt $R/gen-kiln.txt <<'PY' 2>&1 | tee $R/gen-compare.txt
import json,sys
def rows(p):
    out=[]
    for l in open(p):
        try: out.append(json.loads(l))
        except Exception: pass
    return out
a,b=rows(sys.argv[1]),rows(sys.argv[2])
print("rows",len(a),len(b)); print(str(a[-1])[:600] if a else "none"); print(str(b[-1])[:600] if b else "none")
PY
timeout 300 /tmp/b/run cuda_engine_test > $R/cuda_engine_test.txt 2>&1; echo "cuda_engine_test rc $?"; grep -E "PASSED|FAILED" $R/cuda_engine_test.txt | head
save
for b in gemv_bench_v0 gemv_bench; do
  timeout 60 /tmp/b/run $b --fp8 --rows 1,2,3 --json $R/fp8-$b.json > $R/fp8-$b.txt 2>&1; echo "$b fp8 rc $?"; grep -E "^(qkv|o |gate_up|down|layer|m =)" $R/fp8-$b.txt | head -16
done
lat b1-nopers-v0 kiln_v0 --batch-size 1 --no-gemv-persistent; lat b1-nopers-new kiln --batch-size 1 --no-gemv-persistent
lat b2-v0 kiln_v0 --batch-size 2; lat b2-new kiln --batch-size 2; lat b3-v0 kiln_v0 --batch-size 3; lat b3-new kiln --batch-size 3
save
timeout 200 /tmp/b/run quant_test > $R/quant_test.txt 2>&1; echo "quant_test rc $?"; grep -E "PASSED|FAILED" $R/quant_test.txt | head
save
