#!/usr/bin/env bash
# Session 25 call H: fp8 codes through cp.async staging slots.
tar -xJf .gpu/s25h.tar.xz -C /tmp
R=/tmp/s25h/run
$R attention_test --gtest_filter='*Prefill*:*SmallShapes*' > $OUT/attention_test.txt 2>&1; echo "attention_test rc=$?"
grep -E "^\[  (PASSED|FAILED)|FAILED" $OUT/attention_test.txt | head
$R attention_bench --prefill --json $OUT/attention_bench_prefill.json > $OUT/attention_bench_prefill.txt 2>&1
tail -12 $OUT/attention_bench_prefill.txt
