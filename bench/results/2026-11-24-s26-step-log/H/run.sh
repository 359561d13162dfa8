#!/usr/bin/env bash
# Session 26 call H: a register producer (no staging, plain loads in two halves, three 16-bit
# stages; producer 88 / consumers 208 registers): variants 4 (one tile) and 6 (+ ping-pong)
# against call G's bulk producer (variant 2) and main's kernel.
tar -xJf .gpu/s26h.tar.xz -C /tmp
R=/tmp/s26h/run
for v in 6 4; do
  KILN_FP8_PREFILL_VARIANT=$v timeout 120 $R attention_test --gtest_filter='*Fp8*Prefill*:*Prefill*Fp8*' > /tmp/test_v$v.txt 2>&1; echo "variant $v test rc=$? $(grep -E '^\[  (PASSED|FAILED)  \] [0-9]' /tmp/test_v$v.txt | tr '\n' ' ')"
done
$R attention_bench_old --prefill > $OUT/bench_old.txt 2>&1
for v in 2 4 6; do KILN_FP8_PREFILL_VARIANT=$v timeout 60 $R attention_bench_h --prefill > $OUT/bench_v$v.txt 2>&1; done
$R attention_bench_old --prefill > $OUT/bench_old2.txt 2>&1
for f in old v2 v4 v6 old2; do echo "$f:"; grep -E "causal fp8 auto|on 3584 fp8 auto" $OUT/bench_$f.txt | tail -5; done
