#!/usr/bin/env bash
tar -xJf .gpu/s25d.tar.xz -C /tmp
R=/tmp/s25d/run
$R attention_bench --prefill > $OUT/bench.txt 2>&1
tail -12 $OUT/bench.txt
