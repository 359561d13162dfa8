#!/usr/bin/env bash
# Session 26 call O: as call N with the items in the grid's order (a head's row tiles together, tiles and
# barrier phases counted across items) against one CTA an item (KILN_PREFILL_ONE_ITEM=1) and
# a484fbb: tests, attention_bench --prefill.
tar -xJf .gpu/s26n.tar.xz -C /tmp
R=/tmp/s26n/run
CS=/usr/local/cuda/bin/compute-sanitizer
timeout 200 $R attention_test > $OUT/attention_test.txt 2>&1; echo "attention_test rc=$?"; grep -E "^\[  (PASSED|FAILED)" $OUT/attention_test.txt | head -5
timeout 200 $CS --tool racecheck $R attention_test --gtest_filter='*SmallShapes*' > /tmp/racecheck.txt 2>&1; echo "racecheck rc=$?"; tail -1 /tmp/racecheck.txt
timeout 200 $CS --tool memcheck $R attention_test --gtest_filter='*SmallShapes*' > /tmp/memcheck.txt 2>&1; echo "memcheck rc=$?"; tail -1 /tmp/memcheck.txt
$R attention_bench_old --prefill > $OUT/bench_old.txt 2>&1
$R attention_bench_p --prefill > $OUT/bench_p.txt 2>&1
KILN_PREFILL_ONE_ITEM=1 $R attention_bench_p --prefill > $OUT/bench_one.txt 2>&1
$R attention_bench_p --prefill > $OUT/bench_p2.txt 2>&1
for f in old p one p2; do echo "$f:"; grep -E "auto  " $OUT/bench_$f.txt | tail -10; done
