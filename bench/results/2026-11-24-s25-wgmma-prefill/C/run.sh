#!/usr/bin/env bash
# Session 25 call C: where the wgmma prefill kernel's time goes (experiment flags; ncu if present).
tar -xJf .gpu/s25c.tar.xz -C /tmp
R=/tmp/s25c/run
for e in 0 1 2 4 8 12 16 3; do
  KILN_SM90_EXP=$e $R attention_bench --prefill > $OUT/exp_$e.txt 2>&1
  echo "exp=$e"; grep -E "auto +[0-9]" $OUT/exp_$e.txt | grep -v "   .*x$" | grep -E "8x2048|1x4096" 
done
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
if [ -n "$NCU" ]; then
  timeout 240 $NCU --kernel-name regex:PagedPrefillSm90 --launch-skip 92 --launch-count 2 --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section Occupancy $R attention_bench --prefill > $OUT/ncu.txt 2>&1
  grep -vE "^\s*$" $OUT/ncu.txt | grep -E "PagedPrefill|Throughput|Pipe|Stall|stall|Issue|Warp Cycles|Active|Eligible|Bank|Shared|L2|DRAM|Duration|Frequency|Registers|Tensor" | head -120
fi
