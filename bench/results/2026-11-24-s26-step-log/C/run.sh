#!/usr/bin/env bash
# Session 26 call C: fp8-cache prefill with a producer warp: tests, bench against the old kernel,
# offline 2048/128.
tar -xJf .gpu/s26c.tar.xz -C /tmp
R=/tmp/s26c/run
timeout 120 $R attention_test --gtest_filter='*Fp8*Prefill*:*Prefill*Fp8*' > $OUT/attention_test_fp8.txt 2>&1; echo "attention_test fp8 prefill rc=$?"
grep -E "^\[  (PASSED|FAILED)|FAILED|mismatch" $OUT/attention_test_fp8.txt | head -20
$R attention_bench_old --prefill > $OUT/bench_old.txt 2>&1
timeout 60 $R attention_bench --prefill > $OUT/bench_new.txt 2>&1; echo "bench rc=$?"
paste <(grep -E "x|new" $OUT/bench_old.txt | head -40) /dev/null | head -0
echo "--- old"; tail -15 $OUT/bench_old.txt; echo "--- new"; tail -15 $OUT/bench_new.txt
