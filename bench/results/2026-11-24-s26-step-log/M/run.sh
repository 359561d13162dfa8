#!/usr/bin/env bash
# Session 26 call M: the final build (one warp-specialized prefill kernel for both caches):
# GPU tests, sanitizers, attention_bench --prefill against a484fbb twice, offline FP8 2048/128
# against main + step log (s26a) in the same call.
tar -xJf .gpu/s26m.tar.xz -C /tmp; tar -xJf .gpu/s26a.tar.xz -C /tmp
R=/tmp/s26m/run
CS=/usr/local/cuda/bin/compute-sanitizer
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv > $OUT/gpu.txt
$R attention_test > $OUT/attention_test.txt 2>&1; echo "attention_test rc=$?"; grep -E "^\[  (PASSED|FAILED)" $OUT/attention_test.txt
$R cuda_engine_test > /tmp/cuda_engine_test.txt 2>&1; echo "cuda_engine_test rc=$?"; grep -E "^\[  (PASSED|FAILED)" /tmp/cuda_engine_test.txt
timeout 200 $CS --tool memcheck $R attention_test --gtest_filter='*SmallShapes*:*RejectsBad*' > /tmp/memcheck.txt 2>&1; echo "memcheck rc=$?"; tail -2 /tmp/memcheck.txt
timeout 200 $CS --tool racecheck $R attention_test --gtest_filter='*SmallShapes*' > /tmp/racecheck.txt 2>&1; echo "racecheck rc=$?"; tail -2 /tmp/racecheck.txt
for i in 1 2; do
  $R attention_bench_old --prefill > $OUT/bench_old$i.txt 2>&1
  $R attention_bench --prefill > $OUT/bench_new$i.txt 2>&1
done
for f in old1 new1 old2 new2; do echo "$f:"; grep -E "auto  " $OUT/bench_$f.txt | tail -10; done
$R kiln synth --preset llama-3.1-8b --out /tmp/l8 > /dev/null 2>&1
run() { name=$1; bin=$2; shift 2
  $bin kiln bench offline /tmp/l8 --gpu-memory-utilization 0.95 --max-num-batched-tokens 16384 --swap-space 16GiB -q fp8 --kv-cache-dtype fp8 --dataset random --warmup 8 "$@" --json $OUT/$name.json > /tmp/$name.txt 2>&1
  echo "$name: $(grep -E 'Output token throughput' /tmp/$name.txt)"; }
run new_2048_128 $R --input-len 2048 --output-len 128 --num-requests 500
run old_2048_128 /tmp/s26a/run --input-len 2048 --output-len 128 --num-requests 500
