#!/usr/bin/env bash
# s30 call D: Nsight Compute on the e4m3 prefill kernel, Q rotated by RoPE (launch 1) and by the
# kernel (launch 2): the first case of PrefillRotatesQAsRopeStoreKvDoes (bf16, Llama-3.1-8B heads).
mkdir -p $OUT/r; O=$OUT/r
[ -d /tmp/s30c ] || tar -xJf .gpu/s30c.tar.xz -C /tmp
NCU=/usr/local/cuda/bin/ncu
$NCU --kernel-name regex:PagedPrefillSm90Kernel --launch-count 2 \
  --section WarpStateStats --section SchedulerStats --section SpeedOfLight --section LaunchStats \
  --section InstructionStats -o /tmp/rope /tmp/s30c/run attention_test \
  --gtest_filter='*PrefillRotatesQAsRopeStoreKvDoes*' > $O/ncu_log.txt 2>&1
echo "ncu rc=$?"; tail -3 $O/ncu_log.txt
$NCU -i /tmp/rope.ncu-rep --page details > $O/details.txt 2>&1
$NCU -i /tmp/rope.ncu-rep --page raw --csv > $O/raw.csv 2>&1
cd $OUT && tar -cJf r.tar.xz r && rm -rf r
