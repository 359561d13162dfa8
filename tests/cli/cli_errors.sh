#!/usr/bin/env bash
# The kiln CLI on bad input: each case must exit non-zero and print an error naming the problem.
# usage: cli_errors.sh KILN WORKDIR
set -u
kiln=$1
work=$2
rm -rf "$work" && mkdir -p "$work"
pass=0
fail=0
expect_exit() {  # expect_exit STATUS NEEDLE ARGS...: exactly this exit status, NEEDLE in the output
  local want=$1 needle=$2
  shift 2
  local out
  out=$("$kiln" "$@" 2>&1)
  local rc=$?
  if [ $rc -eq "$want" ] && grep -qF -- "$needle" <<<"$out"; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL: kiln $* -> exit $rc, expected exit $want and '$needle'; got: $out"
  fi
}
expect_error() {  # expect_error NEEDLE ARGS...
  local needle=$1
  shift
  local out
  out=$("$kiln" "$@" 2>&1)
  local rc=$?
  if [ $rc -ne 0 ] && grep -qF -- "$needle" <<<"$out"; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL: kiln $* -> exit $rc, expected an error containing '$needle'; got: $out"
  fi
}

expect_error "no such file or directory" inspect "$work/missing"
printf 'GGUF\x03\x00\x00\x00' >"$work/short.gguf"
expect_error "short.gguf" inspect "$work/short.gguf"
printf 'hello' >"$work/notes.txt"
expect_error "bad magic" inspect "$work/notes.txt"
mkdir -p "$work/empty"
expect_error "config.json: missing" inspect "$work/empty"
"$kiln" synth --preset smollm2-135m --num-layers 1 --out "$work/tiny" >/dev/null || fail=$((fail + 1))
expect_error "--gpu-memory" inspect "$work/tiny" --gpu-memory 12XB
expect_error "--gpu-memory-utilization" inspect "$work/tiny" --gpu-memory 80GB --gpu-memory-utilization 1.5
expect_error "--kv-cache-dtype" inspect "$work/tiny" --kv-cache-dtype q4_0
expect_error "quantization: expected none or fp8" inspect "$work/tiny" --quantization int8
expect_error "max_position_embeddings" inspect "$work/tiny" --gpu-memory 80GB --max-model-len 999999
# kiln tokenize / detokenize / chat-template
expect_error "no such file or directory" tokenize "$work/missing" --text hi
expect_error "tokenizer.json" tokenize "$work/empty" --text hi
expect_error "--text" tokenize "$work/tiny"
expect_error "not a token id" detokenize "$work/tiny" --ids "1 x 3"
expect_error "outside the vocab" detokenize "$work/tiny" --ids "99999999"
printf '[{"role": "user"' >"$work/bad.json"
expect_error "not valid JSON" chat-template "$work/tiny" --messages "$work/bad.json"
printf '{"role": "user", "content": "hi"}' >"$work/notlist.json"
expect_error "expected a JSON list" chat-template "$work/tiny" --messages "$work/notlist.json"
printf '[{"role": "user", "content": "hi"}]' >"$work/msgs.json"
expect_error "expected a JSON list of tools" chat-template "$work/tiny" --messages "$work/msgs.json" --tools "$work/notlist.json"
printf "{{ raise_exception('roles must alternate') }}" >"$work/raise.jinja"
expect_error "roles must alternate" chat-template "$work/tiny" --messages "$work/msgs.json" --chat-template "$work/raise.jinja"
printf '{%% for %%}' >"$work/syntax.jinja"
expect_error "syntax.jinja" chat-template "$work/tiny" --messages "$work/msgs.json" --chat-template "$work/syntax.jinja"
expect_error "no such file or directory" chat-template "$work/missing" --messages "$work/msgs.json"
# kiln generate (the tiny checkpoint runs on the CPU backend)
"$kiln" generate "$work/tiny" --prompt hi --max-tokens 2 --kv-cache-memory 64MiB >/dev/null 2>&1 \
  && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: kiln generate on the tiny model"; }
g=(generate "$work/tiny" --kv-cache-memory 64MiB)
expect_error "--prompt" "${g[@]}"
expect_error "temperature" "${g[@]}" --prompt hi --temperature 3
expect_error "top_p" "${g[@]}" --prompt hi --top-p 0
expect_error "logprobs" "${g[@]}" --prompt hi --logprobs 50
expect_error "max_tokens" "${g[@]}" --prompt hi --max-tokens 0
expect_error "stop_token_ids" "${g[@]}" --prompt hi --stop-token-id 99999999
expect_error "cannot open" "${g[@]}" --input "$work/missing.jsonl"
printf '{"prompt": "ok"}\n[1, 2]\n' >"$work/bad.jsonl"
expect_error "bad.jsonl:2" "${g[@]}" --input "$work/bad.jsonl"
printf '{"prompt_token_ids": [1, 99999999]}\n' >"$work/ids.jsonl"
expect_error "outside the vocabulary" "${g[@]}" --input "$work/ids.jsonl"
expect_error "device" "${g[@]}" --prompt hi --device tpu
expect_error "dtype: expected auto, bfloat16, float16 or float32" "${g[@]}" --prompt hi --dtype int8
expect_error "CPU backend computes in float32" "${g[@]}" --prompt hi --device cpu --dtype float16
expect_error "quantization: expected none or fp8, got 'int4'" "${g[@]}" --prompt hi --quantization int4
expect_error "kiln build" "${g[@]}" --prompt hi -q w4a16
expect_error "kv-cache-dtype: expected auto, fp8 or fp8_e4m3, got 'e5m2'" "${g[@]}" --prompt hi --kv-cache-dtype e5m2
# the quantization flags are checked before the model is opened
expect_error "quantization: expected none or fp8" generate "$work/missing" --prompt hi -q awq
"$kiln" "${g[@]}" --prompt hi --max-tokens 2 -q fp8 --kv-cache-dtype fp8 >/dev/null 2>&1 \
  && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: kiln generate -q fp8 --kv-cache-dtype fp8"; }
expect_error "KV cache" generate "$work/tiny" --prompt hi --kv-cache-memory 1KB
expect_error "max_model_len" "${g[@]}" --prompt hi --max-model-len 99999999
expect_error "max_model_len" "${g[@]}" --prompt "a prompt longer than four tokens" --max-model-len 4
expect_error "scheduling policy" "${g[@]}" --prompt hi --scheduling-policy lifo
expect_error "capacity policy" "${g[@]}" --prompt hi --capacity-policy most
expect_error "--max-num-seqs: Value -1 not in range 0 to 65536" "${g[@]}" --prompt hi --max-num-seqs -1
"$kiln" "${g[@]}" --prompt hi --max-tokens 2 --capacity-policy auto --max-num-seqs 0 >/dev/null 2>&1 \
  && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: kiln generate with the automatic policy and seats"; }
expect_error "--swap-space" "${g[@]}" --prompt hi --swap-space 4XB
expect_error "swap space" "${g[@]}" --prompt hi --swap-space 1000TiB
"$kiln" "${g[@]}" --prompt hi --max-tokens 2 --swap-space 8MiB >/dev/null 2>&1 \
  && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: kiln generate with --swap-space 8MiB"; }
expect_error "--l2-prefetch" "${g[@]}" --prompt hi --l2-prefetch 4MB/s
# a CUDA-only hint: the CPU backend ignores it
"$kiln" "${g[@]}" --prompt hi --max-tokens 2 --l2-prefetch 0 >/dev/null 2>&1 \
  && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: kiln generate with --l2-prefetch 0"; }
expect_error "--fp8-gemv-max-rows: Value 9 not in range 0 to 8" "${g[@]}" --prompt hi --fp8-gemv-max-rows 9
# a CUDA-only choice: the CPU backend ignores it
"$kiln" "${g[@]}" --prompt hi --max-tokens 2 --fp8-gemv-max-rows 0 >/dev/null 2>&1 \
  && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: kiln generate with --fp8-gemv-max-rows 0"; }
expect_error "no such file or directory" generate "$work/missing" --prompt hi
# kiln serve: flags are checked before anything listens; a model that fails to load exits 1
s=(serve "$work/tiny" --kv-cache-memory 64MiB --host 127.0.0.1 --port 0)
expect_error "--port" "${s[@]}" --port 70000
expect_error "host" serve "$work/tiny" --host localhost:80
expect_error "--io-threads" "${s[@]}" --io-threads 0
expect_error "--api-key-file" "${s[@]}" --api-key-file "$work/missing-keys"
printf '# no keys here\n\n' >"$work/empty-keys"
expect_error "holds no key" "${s[@]}" --api-key-file "$work/empty-keys"
expect_error "--max-request-body-bytes" "${s[@]}" --max-request-body-bytes lots
expect_error "--max-num-waiting" "${s[@]}" --max-num-waiting -5
expect_error "quantization: expected none or fp8" "${s[@]}" --quantization int8
expect_error "kv-cache-dtype: expected" "${s[@]}" --kv-cache-dtype fp16
expect_error "no such file or directory" serve "$work/missing" --host 127.0.0.1 --port 0
# kiln bench: flags and datasets are checked before any request is sent
b=(bench serve --base-url http://127.0.0.1:9 --model m --tokenizer "$work/tiny" --num-requests 2)
expect_error "--request-rate" "${b[@]}" --request-rate 0
expect_error "--request-rate" "${b[@]}" --request-rate fast
expect_error "--goodput" "${b[@]}" --goodput ttft:soon
expect_error "--extra-body" "${b[@]}" --extra-body '[1]'
expect_error "https is not supported" bench serve --base-url https://example.com --model m --tokenizer "$work/tiny" --num-requests 2
expect_error "needs a max concurrency" "${b[@]}" --duration 10
expect_error "$work/missing.jsonl" "${b[@]}" --dataset jsonl --dataset-path "$work/missing.jsonl"
printf '{"prompt": "hi"}\n{"prompt": \n' >"$work/bad.jsonl"
expect_error "bad.jsonl:2" "${b[@]}" --dataset jsonl --dataset-path "$work/bad.jsonl"
expect_error "vocab" bench serve --base-url http://127.0.0.1:9 --model m --num-requests 2
expect_error "cannot connect" bench serve --base-url http://127.0.0.1:9 --tokenizer "$work/tiny" --num-requests 2
expect_error "no such file or directory" bench offline "$work/missing"
expect_error "batch size" bench latency "$work/tiny" --kv-cache-memory 64MiB --batch-size 0
# kiln eval perplexity: the text and window flags are checked; a short run succeeds
p=(eval perplexity "$work/tiny" --kv-cache-memory 64MiB)
printf 'The lighthouse keeper kept a ledger of every ship that passed the point.\n' >"$work/text.txt"
expect_exit 0 "perplexity" "${p[@]}" --text "$work/text.txt" --window 8 --stride 4 --json "$work/ppl.json"
[ -s "$work/ppl.json" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: no ppl.json"; }
expect_error "cannot open" "${p[@]}" --text "$work/missing.txt"
printf ' \n\n' >"$work/blank.txt"
expect_error "is empty" "${p[@]}" --text "$work/blank.txt"
expect_error "--text" "${p[@]}"
expect_error "--window" "${p[@]}" --text "$work/text.txt" --window 1
expect_error "--stride" "${p[@]}" --text "$work/text.txt" --window 8 --stride 9
expect_error "--max-tokens" "${p[@]}" --text "$work/text.txt" --max-tokens -2
expect_error "max_model_len 32" "${p[@]}" --text "$work/text.txt" --window 64 --max-model-len 32
expect_error "at least 2 tokens" "${p[@]}" --text "$work/text.txt" --max-tokens 1
expect_error "--bogus" "${p[@]}" --text "$work/text.txt" --bogus
# kiln eval compare: 0 pass, 1 fail (thresholds), 2 error
"$kiln" synth --preset smollm2-135m --num-layers 1 --seed 1 --out "$work/tiny2" >/dev/null || fail=$((fail + 1))
c=(eval compare "$work/tiny" "$work/tiny" --kv-cache-memory 64MiB)
printf 'The capital of France is\n\nOnce upon a time\n' >"$work/prompts.txt"
expect_exit 0 "RESULT: PASS" "${c[@]}" --prompts "$work/prompts.txt" --max-tokens 4 --min-exact-match 1 --max-mean-kl 0
expect_exit 1 "RESULT: FAIL" eval compare "$work/tiny" "$work/tiny2" --kv-cache-memory 64MiB --max-tokens 4 --ignore-eos --prompts "$work/prompts.txt" --json "$work/cmp.json"
grep -q '"passed": false' "$work/cmp.json" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: cmp.json"; }
expect_exit 2 "cannot open" "${c[@]}" --prompts "$work/missing.txt"
printf '\n  \n' >"$work/no-prompts.txt"
expect_exit 2 "holds no prompts" "${c[@]}" --prompts "$work/no-prompts.txt"
printf '{"prompt": "ok"}\n{"prompt": \n' >"$work/bad-prompts.jsonl"
expect_exit 2 "bad-prompts.jsonl:2" "${c[@]}" --prompts "$work/bad-prompts.jsonl"
expect_exit 2 "--prompts-format" "${c[@]}" --prompts "$work/prompts.txt" --prompts-format csv
expect_exit 2 "kl_top_k" "${c[@]}" --prompts "$work/prompts.txt" --kl-top-k 30
expect_exit 2 "min_exact_match" "${c[@]}" --prompts "$work/prompts.txt" --min-exact-match 2
expect_exit 2 "max_tokens" "${c[@]}" --prompts "$work/prompts.txt" --max-tokens 0
expect_exit 2 "quantization" "${c[@]}" --prompts "$work/prompts.txt" --b-quantization bogus
expect_exit 2 "B: " eval compare "$work/tiny" "$work/missing" --prompts "$work/prompts.txt"
expect_exit 2 "A: device" "${c[@]}" --prompts "$work/prompts.txt" --a-device tpu
expect_error "--bogus" "${c[@]}" --prompts "$work/prompts.txt" --bogus
expect_error "--prompts" "${c[@]}"
expect_error "quantization: expected none or fp8" bench offline "$work/missing" -q fp4
expect_error "kv-cache-dtype: expected" bench latency "$work/missing" --kv-cache-dtype q8
# kiln build: bad options fail before any work; an engine builds, runs, signs and verifies
expect_exit 1 "--quant: expected none, fp8" build "$work/tiny" --out "$work/eng" --quant fp4
expect_exit 1 "kv-cache-dtype: expected" build "$work/tiny" --out "$work/eng" --kv-cache-dtype q8
expect_exit 1 "--dtype: expected" build "$work/tiny" --out "$work/eng" --dtype int8
expect_exit 1 "--tune: expected" build "$work/tiny" --out "$work/eng" --tune maybe
expect_exit 1 "--calib: --quant fp8 calibrates only with" build "$work/tiny" --out "$work/eng" --quant fp8 --calib "$work/notes.txt"
expect_exit 1 "--sign" build "$work/tiny" --out "$work/eng" --sign "$work/notes.txt"
expect_exit 1 "--out must differ" build "$work/tiny" --out "$work/tiny"
expect_exit 1 "not a kiln engine" build "$work/tiny" --out "$work/empty/.." --tune off
expect_exit 1 "no such file" build "$work/missing" --out "$work/eng"
expect_exit 0 "wrote" build "$work/tiny" --out "$work/eng" --quant fp8 --tune off
expect_exit 1 "pass --force" build "$work/tiny" --out "$work/eng" --tune off
expect_exit 0 "engine" inspect "$work/eng"
g=(generate --device cpu --kv-cache-memory 64MiB --prompt hi --max-tokens 2)
expect_exit 1 "not signed" "${g[@]}" "$work/eng" --verify-key "$work/notes.txt"
expect_exit 1 "needs a kiln engine" "${g[@]}" "$work/tiny" --verify-key "$work/notes.txt"
if openssl genpkey -algorithm ed25519 -out "$work/key.pem" 2>/dev/null &&
   openssl pkey -in "$work/key.pem" -pubout -out "$work/key.pub.pem" 2>/dev/null; then
  expect_exit 0 "signed with" build "$work/tiny" --out "$work/eng" --quant fp8 --tune off --force --sign "$work/key.pem"
  "$kiln" "${g[@]}" "$work/eng" --verify-key "$work/key.pub.pem" >/dev/null 2>&1 && pass=$((pass + 1)) ||
    { fail=$((fail + 1)); echo "FAIL: a signed engine did not verify"; }
  printf 'x' >>"$work/eng/config.json"
  expect_exit 1 "config.json" "${g[@]}" "$work/eng" --verify-key "$work/key.pub.pem"
  expect_exit 1 "not a PEM public key" "${g[@]}" "$work/eng" --verify-key "$work/notes.txt"
else
  echo "SKIP: the signing cases need the openssl command (Debian openssl)"
fi
# kiln build --quant int8-sq: bad settings and calibration files fail before any work; a build
# with a short calibration writes an engine that eval runs
expect_error "smoothquant-alpha: must be in [0, 1]" build "$work/tiny" --out "$work/sq" --quant int8-sq --smoothquant-alpha 2
expect_error "calibration file not found" build "$work/tiny" --out "$work/sq" --quant int8-sq --calib "$work/missing.txt"
printf '{"text": "ok"}\n{"txt": 1}\n' >"$work/calib.jsonl"
expect_error "calib.jsonl:2: expected an object" build "$work/tiny" --out "$work/sq" --quant int8-sq --calib "$work/calib.jsonl"
for i in $(seq 40); do printf 'the quick brown fox %d. ' "$i"; done >"$work/calib.txt"
"$kiln" build "$work/tiny" --out "$work/sq" --quant int8-sq --calib "$work/calib.txt" \
  --calib-samples 2 --calib-seq-len 16 --tune off >/dev/null 2>&1 \
  && "$kiln" eval perplexity "$work/sq" --text "$work/calib.txt" --device cpu >/dev/null 2>&1 \
  && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: kiln build --quant int8-sq, then eval"; }
# kiln build --quant fp8 --activation-scales / --smoothquant-alpha: only fp8 has activation
# scales to choose, only int8-sq and fp8 smooth; a static build stores the scales and runs
expect_exit 1 "--activation-scales: only --quant fp8" build "$work/tiny" --out "$work/f8" --quant int8-sq --activation-scales static
expect_exit 1 "--activation-scales: only --quant fp8" build "$work/tiny" --out "$work/f8" --activation-scales dynamic
expect_exit 1 "--activation-scales: expected static or dynamic, got 'per-token'" build "$work/tiny" --out "$work/f8" --quant fp8 --activation-scales per-token
expect_exit 1 "smoothquant-alpha: must be in [0, 1]" build "$work/tiny" --out "$work/f8" --quant fp8 --smoothquant-alpha -1
expect_exit 1 "--smoothquant-alpha: only --quant int8-sq and fp8" build "$work/tiny" --out "$work/f8" --quant w4a16-rtn --smoothquant-alpha 0.5
expect_exit 1 "calibration file not found" build "$work/tiny" --out "$work/f8" --quant fp8 --activation-scales static --calib "$work/missing.txt"
expect_exit 1 "--unquantized-layers: 'x' is not a layer index" build "$work/tiny" --out "$work/f8" --quant fp8 --unquantized-layers 0,x
expect_exit 1 "--unquantized-layers: --quant none" build "$work/tiny" --out "$work/f8" --unquantized-layers 0
expect_exit 1 "layer -2 is outside the model's 1 layers" build "$work/tiny" --out "$work/f8" --quant fp8 --unquantized-layers -2 --tune off
"$kiln" build "$work/tiny" --out "$work/f8k" --quant fp8 --unquantized-layers -1 --tune off >/dev/null 2>&1 \
  && grep -q '"unquantized_layers"' "$work/f8k/kiln-engine.json" && ! grep -q '"fp8_e4m3"' "$work/f8k/kiln-engine.json" \
  && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: kiln build --quant fp8 --unquantized-layers -1"; }
expect_exit 1 "--weight-rounding: only --quant fp8" build "$work/tiny" --out "$work/f8" --quant w4a16-gptq --weight-rounding gptq
expect_exit 1 "--weight-rounding: expected nearest or gptq, got 'awq'" build "$work/tiny" --out "$work/f8" --quant fp8 --weight-rounding awq
expect_exit 1 "not combined with --smoothquant-alpha" build "$work/tiny" --out "$work/f8" --quant fp8 --weight-rounding gptq --smoothquant-alpha 0.5
"$kiln" build "$work/tiny" --out "$work/f8g" --quant fp8 --weight-rounding gptq --calib "$work/calib.txt" \
  --calib-samples 2 --calib-seq-len 16 --tune off >/dev/null 2>&1 \
  && grep -q '"gptq-fp8"' "$work/f8g/kiln-engine.json" \
  && "$kiln" eval perplexity "$work/f8g" --text "$work/calib.txt" --device cpu >/dev/null 2>&1 \
  && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: kiln build --quant fp8 --weight-rounding gptq, then eval"; }
"$kiln" build "$work/tiny" --out "$work/f8" --quant fp8 --activation-scales static --smoothquant-alpha 0.5 \
  --calib "$work/calib.txt" --calib-samples 2 --calib-seq-len 16 --tune off >/dev/null 2>&1 \
  && grep -q '"input_scale"' "$work/f8/kiln-engine.json" \
  && grep -q '"activation_scales": "static"' "$work/f8/kiln-engine.json" \
  && "$kiln" eval perplexity "$work/f8" --text "$work/calib.txt" --device cpu >/dev/null 2>&1 \
  && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: kiln build --quant fp8 --activation-scales static, then eval"; }
# kiln build --quant w4a16-*: a group size must divide the input sizes; RTN needs no calibration
expect_error "group size 100" build "$work/tiny" --out "$work/w4" --quant w4a16-rtn --group-size 100 --tune off
expect_error "--calib: w4a16-rtn does not calibrate" build "$work/tiny" --out "$work/w4" --quant w4a16-rtn --group-size 64 --calib "$work/calib.txt"
"$kiln" build "$work/tiny" --out "$work/w4" --quant w4a16-gptq --group-size 64 --calib "$work/calib.txt" \
  --calib-samples 2 --calib-seq-len 16 --tune off >/dev/null 2>&1 \
  && "$kiln" eval perplexity "$work/w4" --text "$work/calib.txt" --device cpu >/dev/null 2>&1 \
  && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: kiln build --quant w4a16-gptq, then eval"; }
# kiln build --quantize-lm-head: only the w4a16 recipes quantize lm_head; a tied model's engine
# gets its own 4-bit lm_head (the manifest says so) and eval runs it
for q in none fp8 int8-sq; do
  expect_exit 1 "--quantize-lm-head: only --quant w4a16-rtn, w4a16-awq and w4a16-gptq" build "$work/tiny" --out "$work/w4h" --quant "$q" --quantize-lm-head
done
"$kiln" build "$work/tiny" --out "$work/w4h" --quant w4a16-rtn --group-size 64 --quantize-lm-head --tune off >/dev/null 2>&1 \
  && grep -q '"quantized_lm_head": true' "$work/w4h/kiln-engine.json" \
  && grep -q '"tie_word_embeddings": false' "$work/w4h/config.json" \
  && "$kiln" eval perplexity "$work/w4h" --text "$work/calib.txt" --device cpu >/dev/null 2>&1 \
  && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: kiln build --quant w4a16-rtn --quantize-lm-head, then eval"; }
truncate -s 1000 "$work/tiny/model.safetensors"
expect_error "model.safetensors" inspect "$work/tiny"
expect_error "not empty" synth --preset smollm2-135m --out "$work/tiny"
expect_error "preset" synth --preset gpt-5 --out "$work/x"
expect_error "--log-level" --log-level loud inspect "$work/tiny"
"$kiln" inspect "$work/missing" >/dev/null 2>&1
[ $? -eq 1 ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: exit status is not 1"; }
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
