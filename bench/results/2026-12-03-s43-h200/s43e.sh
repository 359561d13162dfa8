#!/bin/bash
# Session 43 call E (H200): the committed build's W4A16 tests (its launchers were merged after
# call D; the kernels are the same instances).
cd /tmp && tar -xJf "$OLDPWD/.gpu/e.tar.xz" -C /tmp
R=/tmp/call-E; mkdir -p $R
t() { local n=$1; shift; timeout 120 /tmp/e/run "$@" > $R/test-$n.txt 2>&1; echo "test $n rc $? $(grep -E '^\[  (PASSED|FAILED)' $R/test-$n.txt | tr '\n' ' ')"; }
t lowbit gemm_lowbit_test --gtest_filter='GemmW4Gpu*'
t upload weight_upload_test
t engine cuda_engine_test --gtest_filter='CudaEngine.W4NormInGemvGivesTheSameBits'
sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt; tar -cJf $OUT/r.tar.xz -C /tmp call-E
