#!/usr/bin/env bash
# bench/report_runs.sh — the GPU runs behind docs/benchmarks.md's kiln bench report (issue 7):
# TensorRT-LLM's perf-overview matrix offline, the ISL 467 / OSL 256 serving runs, batch latency,
# and the HF transformers baseline on the same workloads.
#
# usage: bench/report_runs.sh KILN MODEL_DIR OUT_DIR PHASE
#   KILN       the kiln binary (or a wrapper that runs it, e.g. the GPU bundle's `run kiln`)
#   MODEL_DIR  a Llama-3.1-8B checkpoint, e.g. from `kiln synth --preset llama-3.1-8b --out DIR`
#   PHASE      offline | serve | hf | fp8 | fp8-tuned | fp8-latency
#              fp8: the FP8 rows of issue 8 (--quantization fp8 --kv-cache-dtype fp8) offline;
#              fp8-tuned: the same rows with TensorRT-LLM's kind of batch options (a large
#              --max-num-seqs, --capacity-policy guaranteed_no_evict);
#              fp8-latency: batch-1 decode in bf16, FP8 weights, and FP8 weights + KV cache
# Request counts are smaller than TensorRT-LLM's (its matrix sends 1,500-30,000 requests per
# row): each row is sized to run in about a minute or two on an H100 while holding the engine
# at full batch for most of the run. KILN_REPORT_SCALE=N multiplies every count by N.
set -euo pipefail
kiln=$1
model=$2
out=$3
phase=$4
scale=${KILN_REPORT_SCALE:-1}
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$out"
# The engine options of issue 5's best offline figure (docs/benchmarks.md, session 7).
engine=(--gpu-memory-utilization 0.95 --max-num-batched-tokens 16384 --swap-space 16GiB)

case "$phase" in
offline)
  # ISL:OSL:requests
  for row in 128:128:4000 128:2048:256 1000:1000:1000 2048:128:500 5000:500:200; do
    IFS=: read -r isl osl n <<<"$row"
    echo "== kiln bench offline $isl/$osl, $((n * scale)) requests"
    $kiln bench offline "$model" "${engine[@]}" --dataset random --input-len "$isl" \
      --output-len "$osl" --num-requests $((n * scale)) --warmup 8 \
      --json "$out/offline-$isl-$osl.json"
  done
  ;;
serve)
  $kiln serve "$model" "${engine[@]}" --host 127.0.0.1 --port 8000 >"$out/serve.log" 2>&1 &
  server=$!
  trap 'kill $server 2>/dev/null || true' EXIT
  for _ in $(seq 1 240); do
    python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8000/health')" \
      2>/dev/null && break
    kill -0 $server 2>/dev/null || { cat "$out/serve.log"; exit 1; }
    sleep 0.5
  done
  common=(--tokenizer "$model" --dataset random --input-len 467 --output-len 256 --ignore-eos
          --no-progress --warmup 16)
  echo "== kiln bench serve 467/256 at 2 and 16 requests/s, $((45 * scale)) s each"
  $kiln bench serve "${common[@]}" --request-rate 2,16 --duration $((45 * scale)) \
    --json "$out/serve-rates.json" --plot "$out/serve"
  echo "== kiln bench serve 467/256 at an infinite rate, $((1000 * scale)) requests"
  $kiln bench serve "${common[@]}" --request-rate inf --num-requests $((1000 * scale)) \
    --json "$out/serve-inf.json"
  kill $server
  wait $server || true
  trap - EXIT
  echo "== kiln bench latency"
  $kiln bench latency "$model" "${engine[@]}" --batch-size 1 --input-len 128 --output-len 256 \
    --iterations 5 --json "$out/latency-b1.json"
  $kiln bench latency "$model" "${engine[@]}" --batch-size 64 --input-len 1024 \
    --output-len 256 --iterations 3 --json "$out/latency-b64.json"
  ;;
fp8 | fp8-tuned)
  # TensorRT-LLM v0.17's FP8 rows (H100: 15,245 / 28,837 / 3,557 output tok/s).
  batch=()
  [ "$phase" = fp8-tuned ] && batch=(--max-num-seqs 2048 --capacity-policy guaranteed_no_evict)
  for row in 1000:1000:1000 128:128:4000 2048:128:500; do
    IFS=: read -r isl osl n <<<"$row"
    echo "== kiln bench offline FP8 $isl/$osl, $((n * scale)) requests ${batch[*]}"
    $kiln bench offline "$model" "${engine[@]}" "${batch[@]}" --quantization fp8 \
      --kv-cache-dtype fp8 --dataset random --input-len "$isl" --output-len "$osl" \
      --num-requests $((n * scale)) --warmup 8 --json "$out/offline-$phase-$isl-$osl.json"
  done
  ;;
fp8-latency)
  for q in "none auto" "fp8 auto" "fp8 fp8"; do
    read -r quant kv <<<"$q"
    echo "== kiln bench latency batch 1, quantization $quant, KV cache $kv"
    $kiln bench latency "$model" "${engine[@]}" --quantization "$quant" --kv-cache-dtype "$kv" \
      --batch-size 1 --input-len 128 --output-len 256 --iterations 5 \
      --json "$out/latency-b1-$quant-$kv.json"
  done
  ;;
hf)
  # The ISL/OSL matrix in static batches, then batch-1 TTFT and ITL at 467 / 256.
  python3 "$here/hf_workloads.py" --model "$model" --json "$out/hf.json" --max-seconds 520
  ;;
*)
  echo "report_runs.sh: unknown phase '$phase' (offline, serve, hf, fp8 or fp8-latency)" >&2
  exit 2
  ;;
esac
