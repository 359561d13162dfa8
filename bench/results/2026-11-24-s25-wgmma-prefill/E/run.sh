#!/usr/bin/env bash
# Session 25 call E: final build: GPU tests, sanitizers, attention_bench --prefill.
tar -xJf .gpu/s25e.tar.xz -C /tmp
R=/tmp/s25e/run
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv > $OUT/gpu.txt
$R attention_test > $OUT/attention_test.txt 2>&1; echo "attention_test rc=$?"
grep -E "^\[  (PASSED|FAILED)|FAILED" $OUT/attention_test.txt | head
$R cuda_engine_test > $OUT/cuda_engine_test.txt 2>&1; echo "cuda_engine_test rc=$?"
grep -E "^\[  (PASSED|FAILED)|FAILED" $OUT/cuda_engine_test.txt | head
CS=/usr/local/cuda/bin/compute-sanitizer
timeout 200 $CS --tool memcheck $R attention_test --gtest_filter='*SmallShapes*:*RejectsBad*' > $OUT/memcheck.txt 2>&1; echo "memcheck rc=$?"; tail -3 $OUT/memcheck.txt
timeout 200 $CS --tool racecheck $R attention_test --gtest_filter='*SmallShapes*' > $OUT/racecheck.txt 2>&1; echo "racecheck rc=$?"; tail -3 $OUT/racecheck.txt
$R attention_bench --prefill --json $OUT/attention_bench_prefill.json > $OUT/attention_bench_prefill.txt 2>&1
tail -40 $OUT/attention_bench_prefill.txt
