#!/usr/bin/env bash
# s29 call D2: perplexity of the default model (real weights) on the GPU: bf16, FP8 with the 24-bit stream, FP8 with --fp32-residual.
set -x
mkdir -p $OUT/r; O=$OUT/r
cp .gpu/m/part01 /tmp/m/part01
cat /tmp/m/part00 /tmp/m/part01 > /tmp/smol.gguf
sha256sum /tmp/smol.gguf | tee $O/sha.txt
[ -d /tmp/s29a ] || tar -xJf .gpu/s29a.tar.xz -C /tmp
R=/tmp/s29a/run
L=/usr/share/common-licenses
ls $L > $O/licenses.txt
cat $L/MPL-2.0 $L/Apache-2.0 $L/GFDL-1.3 > /tmp/textB.txt 2>/dev/null
for text in A:$L/GPL-3 B:/tmp/textB.txt; do
  t=${text%%:*}; f=${text#*:}
  [ -s "$f" ] || continue
  for cfg in bf16: fp8_24:-q_fp8 fp8_32:-q_fp8_--fp32-residual fp8kv_24:-q_fp8_--kv-cache-dtype_fp8 fp8kv_32:-q_fp8_--kv-cache-dtype_fp8_--fp32-residual; do
    n=${cfg%%:*}; flags=$(echo ${cfg#*:} | tr _ ' ')
    $R kiln eval perplexity /tmp/smol.gguf --text $f --window 1024 --stride 512 --dtype bfloat16 $flags --json $O/ppl_${t}_$n.json > $O/ppl_${t}_$n.txt 2>&1
    echo "$t $n rc=$? $(grep -i perplexity $O/ppl_${t}_$n.txt | tail -1)"
  done
done
cd $OUT && tar -cJf r.tar.xz r && rm -rf r
