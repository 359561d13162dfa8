#!/usr/bin/env bash
# Session 26 call F: Nsight Compute on the fp8-cache producer kernel (patch in D/, variant 2:
# one tile a time, ping-pong), 1 x 4,096 causal: warp states and per-instruction stall samples.
tar -xJf .gpu/s26f.tar.xz -C /tmp
NCU=/usr/local/cuda/bin/ncu
$NCU --kernel-name regex:Sm90Fp8Kernel --launch-skip 3 --launch-count 1 \
  --section WarpStateStats --section SchedulerStats --section SourceCounters \
  --section ComputeWorkloadAnalysis --section SpeedOfLight --section Occupancy \
  -o /tmp/prod /tmp/s26f/run attention_bench_producer --prefill > /tmp/ncu_log.txt 2>&1
echo "ncu rc=$?"; tail -3 /tmp/ncu_log.txt
$NCU -i /tmp/prod.ncu-rep --page details > $OUT/details.txt 2>&1
$NCU -i /tmp/prod.ncu-rep --page source --csv --print-source sass > $OUT/source.csv 2>&1
ls -la $OUT
