#!/usr/bin/env bash
# s22c: SiluMulFp8 with a block per SM walking the rows (up to 4,096 rows): quant_test (the two
# grids give the same bytes), silu_fp8_bench (both grids), offline 128/128 and 1000/1000 and
# batch-1 / batch-64 latency, new vs kiln_ced (ced63f5: the same code without the walking kernel).
tar -xJf .gpu/s22c.tar.xz -C /tmp; R=/tmp/s22c/run; O=$OUT/s22c; mkdir -p $O/json
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
t0=$(date +%s)
timeout 120 $R quant_test > $O/tests.txt 2>&1; echo "rc=$?" >> $O/tests.txt
timeout 120 $R silu_fp8_bench --json $O/json/silu.json > $O/silu.txt 2>&1; echo "rc=$?" >> $O/silu.txt
echo "tests+bench done $(( $(date +%s) - t0 )) s" >> $O/gpu.txt
timeout 100 $R kiln synth --preset llama-3.1-8b --out /tmp/l8 > /dev/null 2>&1
off() { local bin=$1 name=$2 i=$3 o=$4 n=$5; shift 5; echo "== $name" >> $O/off.txt
  timeout 170 $R $bin bench offline /tmp/l8 --gpu-memory-utilization 0.95 --max-num-batched-tokens 16384 --swap-space 16GiB -q fp8 --kv-cache-dtype fp8 --dataset random --warmup 8 --input-len $i --output-len $o --num-requests $n --json $O/json/$name.json "$@" > /tmp/off.log 2>&1
  echo "rc=$? t=$(( $(date +%s) - t0 ))" >> $O/off.txt; tail -3 /tmp/off.log >> $O/off.txt; }
lat() { local bin=$1 name=$2 b=$3; echo "== $name" >> $O/lat.txt
  timeout 100 $R $bin bench latency /tmp/l8 -q fp8 --batch-size $b --input-len 128 --output-len 128 --iterations 3 --warmup 1 --json $O/json/$name.json > /tmp/lat.log 2>&1
  echo "rc=$?" >> $O/lat.txt; tail -4 /tmp/lat.log >> $O/lat.txt; }
off kiln new-128 128 128 4000
off kiln_ced ced-128 128 128 4000
lat kiln lat-new-b1 1
lat kiln_ced lat-ced-b1 1
lat kiln lat-new-b64 64
lat kiln_ced lat-ced-b64 64
off kiln new-1000 1000 1000 1000
[ $(( $(date +%s) - t0 )) -lt 480 ] && off kiln_ced ced-1000 1000 1000 1000
echo "done $(( $(date +%s) - t0 )) s" >> $O/gpu.txt
cd $O && tar -cf json.tar json && rm -rf json
