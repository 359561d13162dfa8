#!/bin/bash
# Session 31 call D: tests; gate_up_bench (codes against exact products); cuda_bench --profile-ops
# fused / unfused; offline 2048/128 x 3,000 pair, unfused first.
cd /tmp && tar -xJf "$OLDPWD/.gpu/d.tar.xz" -C /tmp
R=$OUT/call-D; mkdir -p $R
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,driver_version --format=csv > $R/gpu.txt
for t in fp8_gate_up_test quant_test elementwise_test cuda_engine_test; do
  timeout 150 /tmp/d/run $t > $R/$t.txt 2>&1; echo "$t rc $?" | tee -a $R/tests.txt; tail -3 $R/$t.txt | head -1
done
timeout 100 /tmp/d/run gate_up_bench --rows 15360 --seconds 2 --json $R/bench.json > $R/bench.txt 2>&1; echo "bench rc $?" >> $R/bench.txt
head -3 $R/bench.txt
[ -d /tmp/l8 ] || timeout 200 /tmp/d/run kiln synth --preset llama-3.1-8b --out /tmp/l8 > $R/synth.txt 2>&1
P="--model /tmp/l8 -q fp8 --kv-cache-dtype fp8 --sections 4 --max-num-batched-tokens 16384 --gpu-memory-utilization 0.95 --swap-space 16GiB --max-num-seqs 1024 --capacity-policy auto --offline-in 2048 --offline-out 128 --offline-requests 120 --profile-ops"
timeout 150 /tmp/d/run cuda_bench $P --json $R/ops-f.json > $R/ops-f.txt 2>&1; echo "ops f rc $?"
timeout 150 /tmp/d/run cuda_bench $P --no-fused-gate-up --json $R/ops-u.json > $R/ops-u.txt 2>&1; echo "ops u rc $?"
python3 - $R/ops-f.json $R/ops-u.json <<'PY'
import json, sys
for f in sys.argv[1:]:
    d = json.load(open(f))
    def find(o, key):
        if isinstance(o, dict):
            if key in o: return o[key]
            for v in o.values():
                r = find(v, key)
                if r is not None: return r
        return None
    ops = find(d, "mixed_op_seconds"); st = find(d, "steps")
    n = st.get("mixed") if isinstance(st, dict) else None
    print(f, "mixed steps", n)
    if ops and n:
        print({k: round(v / n * 1e3, 2) for k, v in ops.items()}, "sum", round(sum(ops.values()) / n * 1e3, 1))
PY
O="--gpu-memory-utilization 0.95 --max-num-batched-tokens 16384 --swap-space 16GiB -q fp8 --kv-cache-dtype fp8 --dataset random --warmup 8 --input-len 2048 --output-len 128 --num-requests 3000"
timeout 200 /tmp/d/run kiln bench offline /tmp/l8 $O --no-fused-gate-up --json $R/off-u.json > $R/off-u.txt 2>&1; echo "u rc $?"; grep "Output token throughput" $R/off-u.txt; tail -1 $R/off-u.txt
timeout 200 /tmp/d/run kiln bench offline /tmp/l8 $O --json $R/off-f.json > $R/off-f.txt 2>&1; echo "f rc $?"; grep "Output token throughput" $R/off-f.txt; tail -1 $R/off-f.txt
