#!/bin/bash
# Session 37 call A: two latency experiments, switched by environment variables in one build:
# KILN_ATTN_EARLY_KV (decode attention's K/V prologue before PdlWait; 1 by default) and
# KILN_GEMV_PREFETCH_ROUNDS (L2 prefetch N rounds ahead in the persistent W8A16 GEMV; 0 by
# default). gemv_bench --chain at 0-3 rounds; decode step at each setting; attention_test,
# quant_test.
cd /tmp && tar -xJf "$OLDPWD/.gpu/a.tar.xz" -C /tmp
R=/tmp/call-A; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt; tar -cJf $OUT/r.tar.xz -C /tmp call-A; }
nvidia-smi --query-gpu=name,power.limit,driver_version --format=csv > $R/gpu.txt
timeout 100 /tmp/a/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
for r in 0 1 2 3; do
  KILN_GEMV_PREFETCH_ROUNDS=$r timeout 60 /tmp/a/run gemv_bench --chain --json $R/chain-pf$r.json > $R/chain-pf$r.txt 2>&1; echo "chain pf$r rc $?"; head -5 $R/chain-pf$r.txt
done
save
L="--batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1"
lat() {  # name early pf extra
  KILN_ATTN_EARLY_KV=$2 KILN_GEMV_PREFETCH_ROUNDS=$3 timeout 90 /tmp/a/run kiln bench latency /tmp/l8 -q fp8 $L $4 --json $R/lat-$1.json > $R/lat-$1.txt 2>&1
  echo "lat $1 rc $? $(python3 -c "import json;print(json.load(open('$R/lat-$1.json'))['decode_step_ms']['mean'])" 2>/dev/null)"
}
lat e0p0 0 0; lat e1p0 1 0; lat e1p2 1 2; lat e1p1 1 1; lat e0p2 0 2
lat e0p0-r2 0 0; lat e1p2-r2 1 2
lat kv8-e0p0 0 0 "--kv-cache-dtype fp8"; lat kv8-e1p2 1 2 "--kv-cache-dtype fp8"
save
timeout 120 /tmp/a/run attention_test > $R/attention_test.txt 2>&1; echo "attention_test rc $?"; grep -E "PASSED|FAILED" $R/attention_test.txt | head
KILN_GEMV_PREFETCH_ROUNDS=2 timeout 150 /tmp/a/run quant_test > $R/quant_test.txt 2>&1; echo "quant_test rc $?"; grep -E "PASSED|FAILED" $R/quant_test.txt | head
save
