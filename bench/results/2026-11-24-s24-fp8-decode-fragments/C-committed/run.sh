#!/usr/bin/env bash
# s24c: the committed fp8 decode kernel (2 stages, one-wave splits): GPU tests + sanitizers,
# offline FP8 + FP8 KV at the three shapes new / old (b3a365e), batch-1 latency,
# attention_bench engine-like and fp8-kv.
tar -xJf .gpu/s24c.tar.xz -C /tmp; R=/tmp/s24c/run; O=$OUT/s24c; mkdir -p $O/json
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
t0=$(date +%s)
timeout 150 $R attention_test > $O/attention_test.txt 2>&1; echo "rc=$?" >> $O/attention_test.txt
tail -3 $O/attention_test.txt >> $O/gpu.txt
timeout 100 $R cuda_engine_test > $O/cuda_engine_test.txt 2>&1; echo "rc=$?" >> $O/cuda_engine_test.txt
tail -3 $O/cuda_engine_test.txt >> $O/gpu.txt
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
export LD_LIBRARY_PATH=/tmp/s24c/lib:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
for tool in memcheck racecheck; do
  timeout 120 $CS --tool $tool /tmp/s24c/bin/attention_test --gtest_filter='*Fp8*SmallShapes*:*Fp8*RejectsBad*:*PagedAttentionGpu*SmallShapes*' > $O/sanitizer-$tool.txt 2>&1; echo "rc=$?" >> $O/sanitizer-$tool.txt
  tail -4 $O/sanitizer-$tool.txt >> $O/gpu.txt
done
echo "tests done $(( $(date +%s) - t0 )) s" >> $O/gpu.txt
timeout 30 $R attention_bench --engine-like --json $O/json/el.json > /dev/null 2>&1
timeout 50 $R attention_bench --fp8-kv --json $O/json/fp8kv.json > /dev/null 2>&1
timeout 100 $R kiln synth --preset llama-3.1-8b --out /tmp/l8 > /dev/null 2>&1
echo "bench+synth done $(( $(date +%s) - t0 )) s" >> $O/gpu.txt
off() { local bin=$1 name=$2 i=$3 o=$4 n=$5; shift 5; echo "== $name" >> $O/off.txt
  timeout 170 $R $bin bench offline /tmp/l8 --gpu-memory-utilization 0.95 --max-num-batched-tokens 16384 --swap-space 16GiB -q fp8 --kv-cache-dtype fp8 --dataset random --warmup 8 --input-len $i --output-len $o --num-requests $n --json $O/json/$name.json "$@" > /tmp/off.log 2>&1
  echo "rc=$? t=$(( $(date +%s) - t0 ))" >> $O/off.txt; grep -i "output token throughput" /tmp/off.log >> $O/off.txt; }
off kiln new-1000 1000 1000 1000
off kiln new-128 128 128 4000
off kiln new-2048 2048 128 500
off kiln_old old-2048 2048 128 500
lat() { local bin=$1 name=$2; timeout 60 $R $bin bench latency /tmp/l8 -q fp8 --kv-cache-dtype fp8 --batch-size 1 --input-len 128 --output-len 128 --iterations 3 --warmup 1 --json $O/json/$name.json > $O/$name.txt 2>&1; echo "rc=$? $name $(( $(date +%s) - t0 ))" >> $O/gpu.txt; }
lat kiln lat1-new
lat kiln_old lat1-old
[ $(( $(date +%s) - t0 )) -lt 480 ] && off kiln new-1000b 1000 1000 1000
echo "all done $(( $(date +%s) - t0 )) s" >> $O/gpu.txt
cd $O && tar -cf json.tar json && rm -rf json
