#!/usr/bin/env bash
# Session 26 call I: the committed fp8-cache producer kernel (register producer, three stages):
# GPU tests, sanitizers, attention_bench --prefill against main's kernel (a484fbb) twice.
tar -xJf .gpu/s26i.tar.xz -C /tmp
R=/tmp/s26i/run
CS=/usr/local/cuda/bin/compute-sanitizer
$R attention_test > $OUT/attention_test.txt 2>&1; echo "attention_test rc=$?"; grep -E "^\[  (PASSED|FAILED)" $OUT/attention_test.txt
$R cuda_engine_test > $OUT/cuda_engine_test.txt 2>&1; echo "cuda_engine_test rc=$?"; grep -E "^\[  (PASSED|FAILED)" $OUT/cuda_engine_test.txt
timeout 200 $CS --tool memcheck $R attention_test --gtest_filter='*SmallShapes*:*RejectsBad*' > $OUT/memcheck.txt 2>&1; echo "memcheck rc=$?"; tail -2 $OUT/memcheck.txt
timeout 200 $CS --tool racecheck $R attention_test --gtest_filter='*SmallShapes*' > $OUT/racecheck.txt 2>&1; echo "racecheck rc=$?"; tail -2 $OUT/racecheck.txt
$R attention_bench_old --prefill > $OUT/bench_old.txt 2>&1
$R attention_bench --prefill > $OUT/bench_new.txt 2>&1
$R attention_bench_old --prefill > $OUT/bench_old2.txt 2>&1
$R attention_bench --prefill > $OUT/bench_new2.txt 2>&1
for f in old new old2 new2; do echo "$f:"; grep -E "auto  " $OUT/bench_$f.txt | tail -10; done
