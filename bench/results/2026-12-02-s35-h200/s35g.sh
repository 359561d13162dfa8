#!/bin/bash
# Session 35 call G: the review mend (shared cache-scale check, no q-head double store in the
# qkv epilogue, the runner's W8 dispatch and q-codes condition factored): quant_test,
# elementwise_test, cuda_engine_test GemvEpiloguesGiveTheSameBits.
cd /tmp && tar -xJf "$OLDPWD/.gpu/g.tar.xz" -C /tmp
R=/tmp/call-G; mkdir -p $R
for t in quant_test elementwise_test "cuda_engine_test --gtest_filter=*GemvEpilogues*"; do
  n=${t%% *}
  timeout 120 /tmp/g/run $t > $R/$n.txt 2>&1; echo "$n rc $?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $R/$n.txt | head -5
done
sed -i "s#/[r]oot[^ ]*#<path>#g" $R/*.txt; tar -cJf $OUT/r.tar.xz -C /tmp call-G
