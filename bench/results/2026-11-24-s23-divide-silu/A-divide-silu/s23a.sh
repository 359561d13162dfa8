#!/usr/bin/env bash
# s23a: exact quantization quotients without a division a value (kernels/divide.h) and a cheaper
# silu: GPU tests, SiluMulFp8 alone old/new, offline FP8 + FP8 KV old (9cc06f1) / new, FP8 GEMMs at
# eager decode row counts (heuristic vs tuned).
tar -xJf .gpu/s23a.tar.xz -C /tmp; R=/tmp/s23a/run; O=$OUT/s23a; mkdir -p $O/json
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
t0=$(date +%s)
for t in divide_test quant_test elementwise_test; do timeout 100 $R $t > $O/$t.txt 2>&1; echo "rc=$?" >> $O/$t.txt; tail -3 $O/$t.txt >> $O/tests.txt; done
timeout 200 $R cuda_engine_test > $O/cuda_engine_test.txt 2>&1; echo "rc=$?" >> $O/cuda_engine_test.txt
echo "tests done $(( $(date +%s) - t0 )) s" >> $O/gpu.txt
timeout 60 $R silu_old --json $O/json/silu-old.json > $O/silu-old.txt 2>&1
timeout 60 $R silu_fp8_bench --json $O/json/silu-new.json > $O/silu-new.txt 2>&1
timeout 100 $R kiln synth --preset llama-3.1-8b --out /tmp/l8 > /dev/null 2>&1
echo "synth done $(( $(date +%s) - t0 )) s" >> $O/gpu.txt
off() { local bin=$1 name=$2 i=$3 o=$4 n=$5; shift 5; echo "== $name" >> $O/off.txt
  timeout 170 $R $bin bench offline /tmp/l8 --gpu-memory-utilization 0.95 --max-num-batched-tokens 16384 --swap-space 16GiB -q fp8 --kv-cache-dtype fp8 --dataset random --warmup 8 --input-len $i --output-len $o --num-requests $n --json $O/json/$name.json "$@" > /tmp/off.log 2>&1
  echo "rc=$? t=$(( $(date +%s) - t0 ))" >> $O/off.txt; tail -22 /tmp/off.log >> $O/off.txt; }
off kiln new-128 128 128 4000
off kiln_old old-128 128 128 4000
off kiln new-1000 1000 1000 1000
off kiln_old old-1000 1000 1000 1000
[ $(( $(date +%s) - t0 )) -lt 400 ] && off kiln new-2048 2048 128 500
[ $(( $(date +%s) - t0 )) -lt 460 ] && timeout 80 $R gemv_bench --prefill --fp8 --rows 264,520,1000,1006,1024 --json $O/json/gemm-eager.json > $O/gemm-eager.txt 2>&1
echo "all done $(( $(date +%s) - t0 )) s" >> $O/gpu.txt
cd $O && tar -cf json.tar json && rm -rf json
