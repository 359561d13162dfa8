#!/bin/bash
# Session 36 call E: gemm_test on the committed code (LinearFp8 / LinearInt8 reach the W8A16 GEMV
# through Gemm::MaybeGemvW8 now).
cd /tmp && tar -xJf "$OLDPWD/.gpu/e.tar.xz" -C /tmp
R=/tmp/call-E; mkdir -p $R
timeout 200 /tmp/e/run gemm_test > $R/gemm_test.txt 2>&1; echo "gemm_test rc $?"; grep -E "PASSED|FAILED" $R/gemm_test.txt | head
sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt; tar -cJf $OUT/r.tar.xz -C /tmp call-E
