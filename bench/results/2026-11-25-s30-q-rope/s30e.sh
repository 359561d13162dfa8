#!/usr/bin/env bash
# s30 call E: Nsight Compute on one engine prefill-attention launch (the 301st) of the profile
# run, Q rotated by the kernel (f) and by RoPE (u), s30c's build.
mkdir -p $OUT/r; O=$OUT/r
[ -d /tmp/s30c ] || tar -xJf .gpu/s30c.tar.xz -C /tmp
R=/tmp/s30c/run
[ -d /tmp/l8 ] || $R kiln synth --preset llama-3.1-8b --out /tmp/l8 > $O/synth.txt 2>&1
NCU=/usr/local/cuda/bin/ncu
PROF="cuda_bench --model /tmp/l8 -q fp8 --kv-cache-dtype fp8 --sections 4 --max-num-batched-tokens 16384 --gpu-memory-utilization 0.95 --swap-space 16GiB --max-num-seqs 1024 --capacity-policy auto --offline-in 2048 --offline-out 128 --offline-requests 120 --profile-ops"
for run in f: u:--unfused-q-rope; do
  name=${run%%:*}; flag=${run#*:}
  $NCU --kernel-name regex:PagedPrefillSm90Kernel --launch-skip 300 --launch-count 1 \
    --section WarpStateStats --section SpeedOfLight --section LaunchStats --section InstructionStats \
    -o /tmp/eng$name $R $PROF $flag > $O/ncu_$name.log 2>&1
  $NCU -i /tmp/eng$name.ncu-rep --page details > $O/details_$name.txt 2>&1
  $NCU -i /tmp/eng$name.ncu-rep --page raw --csv > $O/raw_$name.csv 2>&1
done
cd $OUT && tar -cJf r.tar.xz r && rm -rf r
