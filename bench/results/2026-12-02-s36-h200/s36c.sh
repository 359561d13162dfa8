#!/bin/bash
# Session 36 call C: Nsight Compute on the persistent W8A16 GEMV at m = 1 (the 8B's qkv, o,
# gate_up, down; gemv_bench --fp8 --rows 1 runs them with the default, persistent form): DRAM
# throughput, occupancy and warp stall reasons, for the next step's plan.
cd /tmp && tar -xJf "$OLDPWD/.gpu/c.tar.xz" -C /tmp
R=/tmp/call-C; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt; tar -cJf $OUT/r.tar.xz -C /tmp call-C; }
timeout 100 /tmp/c/run gemv_bench --fp8 --rows 1 > $R/fp8-rows1.txt 2>&1; echo "gemv_bench rc $?"; grep -iE "qkv|gate|down|o " $R/fp8-rows1.txt | head -12
save
export LD_LIBRARY_PATH=/tmp/c/lib:/usr/local/cuda/lib64
timeout 300 ncu --kernel-name regex:GemvW8 --launch-count 4 --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats --section MemoryWorkloadAnalysis /tmp/c/bin/gemv_bench --fp8 --rows 1 > $R/ncu.txt 2>&1; echo "ncu rc $?"
grep -E "GemvW8|DRAM Throughput|Duration|Achieved Occupancy|Theoretical Occupancy|Registers Per|Grid Size|Stall Long|Warp Cycles Per Issued|Memory Throughput" $R/ncu.txt | head -60
save
