#!/usr/bin/env bash
# s24e: engine-like decode split sweep of the committed fp8 kernel (f1e8e04), more batch sizes.
tar -xJf .gpu/s24e.tar.xz -C /tmp; R=/tmp/s24e/run; O=$OUT/s24e; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
timeout 200 $R attention_bench --engine-like --json $O/el.json > $O/el.txt 2>&1; echo "rc=$?" >> $O/gpu.txt
