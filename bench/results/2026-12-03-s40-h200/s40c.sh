#!/bin/bash
# Session 40 call C (H200): the L2 hint (--l2-prefetch) at batch 1 for W4A16, FP8 and bf16
# (call B: W4A16 step 1.950 ms with the default 4 MiB, 1.929 with none); the norm in the W4A16
# GEMVs' prologue again (with no L2 hint, alternating); gemv_bench --chain --w4 with the L2-hint
# variants; cuda_bench --profile-ops of the W4A16 engine (call B ran a stale cuda_bench).
cd /tmp && tar -xJf "$OLDPWD/.gpu/c.tar.xz" -C /tmp
R=/tmp/call-C; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt; tar -cJf $OUT/r.tar.xz -C /tmp call-C; }
nvidia-smi --query-gpu=name,power.limit,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.txt
timeout 120 /tmp/c/run gemv_bench --chain --w4 --json $R/chain-w4.json > $R/chain-w4.txt 2>&1; echo "chain rc $?"; tail -10 $R/chain-w4.txt
save
timeout 60 /tmp/c/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1; echo "synth rc $?"
timeout 170 /tmp/c/run kiln build /tmp/l8 --out /tmp/w4 --quant w4a16-rtn --quantize-lm-head > $R/build-w4.txt 2>&1; echo "build rc $?"
lat() {  # name model flags...
  local n=$1 m=$2; shift 2
  timeout 90 /tmp/c/run kiln bench latency $m --batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1 "$@" --json $R/lat-$n.json > $R/lat-$n.txt 2>&1
  echo "lat $n rc $? $(python3 -c "import json;d=json.load(open('$R/lat-$n.json'))['decode_step_ms'];print(d['mean'])" 2>/dev/null)"
}
lat w4-l2-0-1 /tmp/w4 --l2-prefetch 0; lat w4-l2-0-nonorm-1 /tmp/w4 --l2-prefetch 0 --no-gemv-norm
lat w4-l2-4m /tmp/w4; lat w4-l2-1m /tmp/w4 --l2-prefetch 1MiB; lat w4-l2-2m /tmp/w4 --l2-prefetch 2MiB
lat w4-l2-0-2 /tmp/w4 --l2-prefetch 0; lat w4-l2-0-nonorm-2 /tmp/w4 --l2-prefetch 0 --no-gemv-norm
save
lat fp8-l2-4m /tmp/l8 -q fp8; lat fp8-l2-0 /tmp/l8 -q fp8 --l2-prefetch 0; lat fp8-l2-2m /tmp/l8 -q fp8 --l2-prefetch 2MiB
lat bf16-l2-4m /tmp/l8; lat bf16-l2-0 /tmp/l8 --l2-prefetch 0
save
timeout 100 /tmp/c/run cuda_bench --model /tmp/w4 --sections 1 --profile-ops --json $R/profile-w4.json > $R/profile-w4.txt 2>&1; echo "profile rc $?"; python3 -c "import json;d=json.load(open('$R/profile-w4.json'))['decode_batch1'];print(d['step_ms'], d['op_ms'])"
save
