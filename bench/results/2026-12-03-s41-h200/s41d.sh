#!/bin/bash
# Session 41 call D (H200): the committed kernel tracer (its record keeping refactored after
# call C) on gemv_bench --chain --w4 (one CUDA graph per variant, replayed).
cd /tmp && tar -xJf "$OLDPWD/.gpu/d.tar.xz" -C /tmp
REPO=$OLDPWD
R=/tmp/call-D; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt 2>/dev/null; tar -cJf $OUT/r.tar.xz -C /tmp call-D; }
KILN_TRACE_OUT=/tmp/trace-chain.jsonl CUDA_INJECTION64_PATH=/tmp/d/bin/libkiln_kernel_trace.so timeout 120 /tmp/d/run gemv_bench --chain --w4 > $R/chain-w4-traced.txt 2>&1; echo "traced rc $?"; tail -3 $R/chain-w4-traced.txt
python3 $REPO/bench/kernel_trace_summary.py --trace /tmp/trace-chain.jsonl --skip 2 > $R/trace-chain-summary.txt 2>&1; echo "summary rc $?"; head -12 $R/trace-chain-summary.txt
python3 -c "
import json,collections
ks=[json.loads(l) for l in open('/tmp/trace-chain.jsonl')]
print(collections.Counter(k['kind'] for k in ks), len({k['graph_id'] for k in ks}))
print([k for k in ks if k['kind']=='memcpy'][:2])"
save
