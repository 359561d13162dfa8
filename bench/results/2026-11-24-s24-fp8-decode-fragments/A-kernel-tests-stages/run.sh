#!/usr/bin/env bash
# s24a: fp8-cache decode attention with per-lane fragment conversion (PagedDecodeFp8Kernel):
# GPU tests, engine-like decode bench old (b3a365e) / new (4 stages), 3 and 2 stage variants.
tar -xJf .gpu/s24a.tar.xz -C /tmp; R=/tmp/s24a/run; O=$OUT/s24a; mkdir -p $O/json
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
t0=$(date +%s)
timeout 150 $R attention_test > $O/attention_test.txt 2>&1; echo "rc=$?" >> $O/attention_test.txt
echo "attention_test done $(( $(date +%s) - t0 )) s" >> $O/gpu.txt
tail -4 $O/attention_test.txt >> $O/gpu.txt
el() { local bin=$1 name=$2; shift 2; timeout 150 $R $bin --engine-like --json $O/json/$name.json "$@" > $O/$name.txt 2>&1; echo "rc=$? $name done $(( $(date +%s) - t0 )) s" >> $O/gpu.txt; }
el attention_bench new-el
el attention_bench_old old-el
el attention_bench_s3 s3-el --auto-splits-only
el attention_bench_s2 s2-el --auto-splits-only
timeout 150 $R cuda_engine_test > $O/cuda_engine_test.txt 2>&1; echo "rc=$?" >> $O/cuda_engine_test.txt
echo "cuda_engine_test done $(( $(date +%s) - t0 )) s" >> $O/gpu.txt
for b in attention_bench attention_bench_old; do
  [ $(( $(date +%s) - t0 )) -lt 480 ] && timeout 50 $R $b --fp8-kv --json $O/json/$b-fp8kv.json > $O/$b-fp8kv.txt 2>&1
done
echo "all done $(( $(date +%s) - t0 )) s" >> $O/gpu.txt
cd $O && tar -cf json.tar json && rm -rf json
