#!/usr/bin/env bash
# Session 26 call E: the committed build's attention_test (main's kernels, the new block-size cases).
tar -xJf .gpu/s26e.tar.xz -C /tmp
/tmp/s26e/run attention_test > $OUT/attention_test.txt 2>&1; echo "attention_test rc=$?"
grep -E "^\[  (PASSED|FAILED)|bs48|bs256" $OUT/attention_test.txt | head
