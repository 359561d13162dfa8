#!/bin/bash
# Session 31 call B: Fp8GateUpSilu tests and gate_up_bench.
cd /tmp && tar -xJf "$OLDPWD/.gpu/a.tar.xz" -C /tmp
R=$OUT/call-B; mkdir -p $R
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv > $R/gpu.txt
timeout 120 /tmp/a/run fp8_gate_up_test > $R/test.txt 2>&1; echo "test rc $?" >> $R/test.txt
tail -25 $R/test.txt
(nvidia-smi --query-gpu=timestamp,power.draw,clocks.sm --format=csv -lms 500 > $R/smi.csv 2>&1 &)
timeout 200 /tmp/a/run gate_up_bench --rows 15360 --seconds 3 --json $R/bench.json > $R/bench.txt 2>&1; echo "bench rc $?" >> $R/bench.txt
pkill nvidia-smi
cat $R/bench.txt
