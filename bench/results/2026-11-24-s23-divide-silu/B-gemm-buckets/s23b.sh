#!/usr/bin/env bash
# s23b: eager decode steps borrow algorithms tuned in 128-row buckets (cuda::Gemm::kBorrowRows):
# gemm_test + cuda_engine_test, then offline FP8 + FP8 KV: old (9cc06f1), a (s23a: divide + silu),
# new (a + GEMM buckets), same call.
tar -xJf .gpu/s23b.tar.xz -C /tmp; R=/tmp/s23b/run; O=$OUT/s23b; mkdir -p $O/json
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
t0=$(date +%s)
timeout 100 $R gemm_test > $O/gemm_test.txt 2>&1; echo "rc=$?" >> $O/gemm_test.txt
timeout 200 $R cuda_engine_test > $O/cuda_engine_test.txt 2>&1; echo "rc=$?" >> $O/cuda_engine_test.txt
echo "tests done $(( $(date +%s) - t0 )) s" >> $O/gpu.txt
timeout 100 $R kiln synth --preset llama-3.1-8b --out /tmp/l8 > /dev/null 2>&1
echo "synth done $(( $(date +%s) - t0 )) s" >> $O/gpu.txt
off() { local bin=$1 name=$2 i=$3 o=$4 n=$5; shift 5; echo "== $name" >> $O/off.txt
  timeout 170 $R $bin bench offline /tmp/l8 --gpu-memory-utilization 0.95 --max-num-batched-tokens 16384 --swap-space 16GiB -q fp8 --kv-cache-dtype fp8 --dataset random --warmup 8 --input-len $i --output-len $o --num-requests $n --json $O/json/$name.json "$@" > /tmp/off.log 2>&1
  echo "rc=$? t=$(( $(date +%s) - t0 ))" >> $O/off.txt; grep -iE "tune|capture|throughput" /tmp/off.log >> $O/off.txt; }
off kiln new-128 128 128 4000
off kiln_a a-128 128 128 4000
off kiln_old old-128 128 128 4000
off kiln new-1000 1000 1000 1000
off kiln_a a-1000 1000 1000 1000
[ $(( $(date +%s) - t0 )) -lt 470 ] && off kiln new-2048 2048 128 500
[ $(( $(date +%s) - t0 )) -lt 510 ] && off kiln_a a-2048 2048 128 500
echo "all done $(( $(date +%s) - t0 )) s" >> $O/gpu.txt
cd $O && tar -cf json.tar json && rm -rf json
