#!/usr/bin/env bash
# Session 26 call G: the producer kernel with a faster producer (72 registers, conversion
# unrolled 4, a `drained` mbarrier instead of the producer's named barrier; consumers 216):
# fp8 prefill tests (variants 0 and 2), benches of all four variants against main's kernel.
tar -xJf .gpu/s26g.tar.xz -C /tmp
R=/tmp/s26g/run
for v in 2 0; do
  KILN_FP8_PREFILL_VARIANT=$v timeout 120 $R attention_test --gtest_filter='*Fp8*Prefill*:*Prefill*Fp8*' > /tmp/test_v$v.txt 2>&1; echo "variant $v test rc=$? $(grep -E '^\[  (PASSED|FAILED)  \] [0-9]' /tmp/test_v$v.txt | tr '\n' ' ')"
done
$R attention_bench_old --prefill > $OUT/bench_old.txt 2>&1
for v in 0 1 2 3; do KILN_FP8_PREFILL_VARIANT=$v timeout 60 $R attention_bench_g --prefill > $OUT/bench_v$v.txt 2>&1; done
echo "old:"; grep -E "causal fp8 auto|on 3584 fp8 auto" $OUT/bench_old.txt | tail -5
for v in 0 1 2 3; do echo "v$v:"; grep -E "causal fp8 auto|on 3584 fp8 auto" $OUT/bench_v$v.txt | tail -5; done
