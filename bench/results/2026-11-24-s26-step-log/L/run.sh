#!/usr/bin/env bash
# Session 26 call L: the producer structure for the T (bf16/fp16) cache too (cp.async by the
# producer warpgroup, completion on the mbarrier; KILN_T_PREFILL_WS=1), against the T kernel.
tar -xJf .gpu/s26l.tar.xz -C /tmp
R=/tmp/s26l/run
KILN_T_PREFILL_WS=1 timeout 200 $R attention_test > $OUT/attention_test_ws.txt 2>&1; echo "attention_test (ws) rc=$?"; grep -E "^\[  (PASSED|FAILED)" $OUT/attention_test_ws.txt | head
$R attention_bench_old --prefill > $OUT/bench_old.txt 2>&1
$R attention_bench_ws --prefill > $OUT/bench_t.txt 2>&1
KILN_T_PREFILL_WS=1 $R attention_bench_ws --prefill > $OUT/bench_ws.txt 2>&1
for f in old t ws; do echo "$f:"; grep -E "auto  " $OUT/bench_$f.txt | tail -10; done
