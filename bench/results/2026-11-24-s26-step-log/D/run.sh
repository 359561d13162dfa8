#!/usr/bin/env bash
# Session 26 call D: the fp8-cache producer kernel's four consumer loops (KILN_FP8_PREFILL_VARIANT:
# bit 0 overlapped S/PV, bit 1 ping-pong): fp8 prefill tests and attention_bench --prefill each.
tar -xJf .gpu/s26d.tar.xz -C /tmp
R=/tmp/s26d/run
$R attention_bench_old --prefill > $OUT/bench_old.txt 2>&1
for v in 0 1 2 3; do
  KILN_FP8_PREFILL_VARIANT=$v timeout 120 $R attention_test --gtest_filter='*Fp8*Prefill*:*Prefill*Fp8*' > $OUT/test_v$v.txt 2>&1; echo "variant $v test rc=$? $(grep -E '^\[  (PASSED|FAILED)  \] [0-9]' $OUT/test_v$v.txt | tr '\n' ' ')"
  KILN_FP8_PREFILL_VARIANT=$v timeout 60 $R attention_bench --prefill > $OUT/bench_v$v.txt 2>&1
done
echo "old:"; grep -E "causal fp8 auto|on 3584 fp8 auto" $OUT/bench_old.txt | tail -5
for v in 0 1 2 3; do echo "v$v:"; grep -E "causal fp8 auto|on 3584 fp8 auto" $OUT/bench_v$v.txt | tail -5; done
