#!/bin/bash
# Session 35 call F: the committed code's GPU tests that its changes reach (gemm_test,
# gemm_lowbit_test, quant_test, elementwise_test, the whole cuda_engine_test), and
# scripts/gpu/check_cuda.py on a synthetic SmolLM2-135M in FP8 (bf16 and fp16, bf16 and fp8 KV)
# and as an int8-sq engine (the INT8 W8A16 rows take the same GEMV epilogues), CUDA against the
# CPU backend.
cd /tmp && tar -xJf "$OLDPWD/.gpu/f.tar.xz" -C /tmp; cd "$OLDPWD"
R=/tmp/call-F; mkdir -p $R
save() { sed -i "s#/[r]oot[^ ]*#<path>#g; s#/[w]ork/main#<repo>#g" $R/*.txt; tar -cJf $OUT/r.tar.xz -C /tmp call-F; }
for t in quant_test elementwise_test gemm_test gemm_lowbit_test cuda_engine_test; do
  timeout 400 /tmp/f/run $t --gtest_output=json:$R/$t.json > $R/$t.txt 2>&1; echo "$t rc $?"
  grep -E "^\[  (PASSED|FAILED) |FAILED  \]|SKIPPED \]" $R/$t.txt | head -8
  save
done
W=/tmp/w; mkdir -p $W
timeout 60 /tmp/f/run kiln synth --preset smollm2-135m --out $W/smol > $R/synth.txt 2>&1; echo "synth rc $?"
for v in "bf16-fp8:--dtype bfloat16 --quantization fp8" "f16-fp8:--dtype float16 --quantization fp8" "bf16-fp8kv:--dtype bfloat16 --quantization fp8 --kv-cache-dtype fp8"; do
  n=${v%%:*}; a=${v#*:}
  timeout 200 python3 scripts/gpu/check_cuda.py --kiln "/tmp/f/run kiln" --model $W/smol --lengths 7,83,300 $a --json $R/check-$n.json > $R/check-$n.txt 2>&1; echo "check $n rc $?"; tail -4 $R/check-$n.txt
done
save
python3 - > $W/calib.txt <<'PY'
import random
random.seed(0)
words = "the of and to in is was for on that with as by at from it this be are an or which".split()
for _ in range(400):
    print(" ".join(random.choice(words) for _ in range(60)) + ".")
PY
timeout 200 /tmp/f/run kiln build --model $W/smol --out $W/smol-int8 --quant int8-sq --calib $W/calib.txt > $R/build-int8.txt 2>&1; echo "build int8 rc $?"; tail -2 $R/build-int8.txt
timeout 200 python3 scripts/gpu/check_cuda.py --kiln "/tmp/f/run kiln" --model $W/smol-int8 --lengths 7,83,300 --skip-hf --json $R/check-int8.json > $R/check-int8.txt 2>&1; echo "check int8 rc $?"; tail -4 $R/check-int8.txt
save
