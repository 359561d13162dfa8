#!/usr/bin/env python3
"""Records HF transformers' logprobs and greedy tokens for kiln's default model (golden files).

Run once, by hand, with a Python that has CPU torch, transformers, gguf and safetensors (torch is
not available in CI; the outputs are committed):

    "$TORCH_PYTHON" tests/golden/make_golden.py \
        --gguf "$(scripts/fetch-default-model)" --out tests/golden/smollm2

What it does:
  1. Dequantizes every tensor of the GGUF with the `gguf` package (gguf.quants.dequantize) to
     float32 and maps GGUF names to HF names.
  2. Undoes llama.cpp's q/k row permutation (convert_hf_to_gguf.py LlamaModel.permute:
     reshape(heads, 2, head_dim / 2, cols).swapaxes(1, 2)); its inverse is
     reshape(heads, head_dim / 2, 2, cols).swapaxes(1, 2).
  3. Writes an HF LlamaForCausalLM directory (config.json + model.safetensors, f32) to a temp dir
     and checks its tensors equal what transformers' own GGUF loader (load_gguf_checkpoint)
     produces from the file.
  4. Loads it with transformers in float32 with eager attention and, for each prompt (token ids
     from the GGUF's own tokenizer via AutoTokenizer(gguf_file=...)), records the top-20
     log_softmax values at every position and 64 greedy tokens from `generate(do_sample=False)`
     with EOS stopping disabled (so exactly 64 tokens, as kiln's runner produces them).
  5. Writes golden.json (logprobs rounded to 6 decimals) and prints a summary.
"""
import argparse
import datetime
import hashlib
import importlib.metadata
import json
import os
import platform
import shutil
import sys
import tempfile

import gguf
import numpy as np
import safetensors.numpy
import torch
import transformers

TOP_K = 20
NUM_GREEDY = 64

# Texts written for this file (no third-party text). Lengths in tokens are set by slicing where
# noted, so the prompts span 1 to 512 tokens.
LONG_TEXT = (
    "The old lighthouse keeper kept a ledger of every ship that passed the point. Each morning "
    "he climbed the spiral stairs, wiped the salt from the great lens, and wrote down the names "
    "he had seen in the night: fishing boats with their lamps swinging, a grain barge riding low, "
    "once a schooner with patched sails that he never saw again. The ledger grew into a history "
    "of the coast. Storms appear in it as gaps, weeks when nothing moved and the keeper wrote "
    "only the wind's direction and the height of the waves against the rocks. Calm summers "
    "appear as long columns of names in a careful hand.\n\n"
    "When the lighthouse was automated, the ledger went to the town library. A student found it "
    "there decades later and counted the entries. She noticed that the number of ships rose "
    "every spring, fell sharply each winter, and slowly declined over forty years as the "
    "harbour silted up and trade moved south to the deeper port. She plotted the counts by "
    "month and found a second pattern hidden inside the first: on nights with a full moon the "
    "keeper recorded more ships, not because more sailed, but because he could see them.\n\n"
    "Measurement, she wrote in her thesis, always carries the shape of the instrument. A "
    "thermometer in the sun reads the sun as much as the air. A survey answered by telephone "
    "hears only people who answer telephones. The keeper's ledger measured ships and moonlight "
    "together, and the only way to separate them was to know how the ledger had been made. "
    "She spent a year reconstructing his routine from the margins: the nights he was ill and "
    "his daughter kept watch, the season the lamp was dimmed by a cracked chimney, the week a "
    "fog bank sat on the point and he wrote nothing but the word fog, seven times, underlined.\n\n"
    "Her corrected series was flatter and less dramatic than the raw counts. Some colleagues "
    "found it disappointing. Others saw in it the real decline of a small harbour, measured as "
    "honestly as an old ledger allows. The library later put the ledger on display beside her "
    "charts, and visitors tend to linger over the page with the seven fogs. People like to "
    "imagine the keeper at his window, pen in hand, looking out at nothing, and writing it down "
    "anyway, because the rule was to write down what you saw, and on those nights what he saw "
    "was fog.\n\n"
    "A second student, years after the first, asked a different question of the same pages. "
    "Which ships came back? She matched names across seasons and found that most boats "
    "appeared for a few years and vanished, while a handful returned every spring for decades, "
    "their names spelled slightly differently each time, as if the keeper wrote them from "
    "memory before checking. Those few ships carried most of the trade. The harbour had not "
    "died slowly, she argued; it had lived on a few loyal captains, and when the last of them "
    "retired, it stopped almost at once. The two theses now sit side by side on the same shelf, "
    "drawn from one ledger and disagreeing politely about what it means.\n\n"
    "The keeper himself left no opinion on the matter. His last entry notes a clear sky, a "
    "light westerly wind, and one ship, unnamed, heading out past the point before dawn."
)


def chat_prompt(tokenizer):
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return text, tokenizer.encode(text, add_special_tokens=False)


def prompts(tokenizer):
    """(name, text, token ids) for each prompt; lengths 1, ~12-30 (chat), ~60, ~200, 512."""
    enc = lambda t: tokenizer.encode(t, add_special_tokens=False)
    out = []
    one = enc("The")
    assert len(one) == 1, one
    out.append(("one_token", "The", one))
    text, ids = chat_prompt(tokenizer)
    out.append(("chat", text, ids))
    medium = "Here is a short recipe for bread. Mix flour, water, salt and yeast into a dough, " \
             "knead it for ten minutes, and let it rise in a warm place until it doubles in " \
             "size. Shape the loaf, let it rise again, then bake it until the crust is brown " \
             "and the bottom sounds hollow when tapped. The"
    out.append(("recipe", medium, enc(medium)))
    long_ids = enc(LONG_TEXT)
    assert len(long_ids) >= 512, len(long_ids)
    out.append(("ledger_200", tokenizer.decode(long_ids[:200]), long_ids[:200]))
    out.append(("ledger_512", tokenizer.decode(long_ids[:512]), long_ids[:512]))
    return out


GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}


def field(reader, key):
    """A scalar metadata value."""
    f = reader.fields[key]
    return f.parts[f.data[0]].tolist()[0]


def field_str(reader, key):
    f = reader.fields[key]
    return bytes(f.parts[f.data[0]]).decode()


def unpermute(w, heads):
    """Inverse of llama.cpp's permute: GGUF row h*hd + 2j + i -> HF row h*hd + i*hd/2 + j."""
    rows = w.shape[0]
    return w.reshape(heads, rows // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def hf_checkpoint(gguf_path, out_dir):
    reader = gguf.GGUFReader(gguf_path)
    assert field_str(reader, "general.architecture") == "llama"
    heads = field(reader, "llama.attention.head_count")
    kv_heads = field(reader, "llama.attention.head_count_kv")
    tensors = {}
    for t in reader.tensors:
        data = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        data = data.reshape([int(d) for d in reversed(t.shape)])  # ggml ne0 is the last axis
        if t.name in GLOBAL_NAMES:
            name = GLOBAL_NAMES[t.name]
        else:
            _, layer, rest = t.name.split(".", 2)
            name = f"model.layers.{layer}.{LAYER_NAMES[rest]}"
            if rest == "attn_q.weight":
                data = unpermute(data, heads)
            elif rest == "attn_k.weight":
                data = unpermute(data, kv_heads)
        tensors[name] = np.ascontiguousarray(data)
    vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": field(reader, "llama.embedding_length"),
        "intermediate_size": field(reader, "llama.feed_forward_length"),
        "num_hidden_layers": field(reader, "llama.block_count"),
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "max_position_embeddings": field(reader, "llama.context_length"),
        "rms_norm_eps": field(reader, "llama.attention.layer_norm_rms_epsilon"),
        "rope_theta": field(reader, "llama.rope.freq_base"),
        "vocab_size": vocab,
        "tie_word_embeddings": "lm_head.weight" not in tensors,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "torch_dtype": "float32",
        "bos_token_id": field(reader, "tokenizer.ggml.bos_token_id"),
        "eos_token_id": field(reader, "tokenizer.ggml.eos_token_id"),
    }
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    safetensors.numpy.save_file(tensors, os.path.join(out_dir, "model.safetensors"))
    return config, tensors


def check_against_transformers_gguf_loader(gguf_path, config, tensors):
    """transformers de-quantizes and un-permutes GGUF files itself (load_gguf_checkpoint, the
    function behind from_pretrained(gguf_file=...)): a reference not written here."""
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**config))
    state = load_gguf_checkpoint(gguf_path, return_tensors=True, model_to_load=model)["tensors"]
    worst = 0.0
    for name, ours in tensors.items():
        theirs = state[name].float().numpy()
        assert theirs.shape == ours.shape, (name, theirs.shape, ours.shape)
        worst = max(worst, float(np.abs(theirs - ours).max()))
    assert set(state) == set(tensors), set(state) ^ set(tensors)
    return worst


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", default=os.environ.get("KILN_DEFAULT_MODEL"), required=False)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "smollm2"))
    args = ap.parse_args()
    if not args.gguf:
        sys.exit("give --gguf or set KILN_DEFAULT_MODEL (scripts/fetch-default-model)")
    torch.manual_seed(0)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    with open(args.gguf, "rb") as f:
        sha256 = hashlib.sha256(f.read()).hexdigest()

    tmp = tempfile.mkdtemp(prefix="kiln_golden_")
    try:
        config, tensors = hf_checkpoint(args.gguf, tmp)
        loader_diff = check_against_transformers_gguf_loader(args.gguf, config, tensors)
        print(f"max |ours - transformers' GGUF loader| over all tensors: {loader_diff}")
        assert loader_diff == 0.0, "the de-quantized / un-permuted weights disagree"
        tokenizer = transformers.AutoTokenizer.from_pretrained(
            os.path.dirname(args.gguf), gguf_file=os.path.basename(args.gguf))
        model = transformers.LlamaForCausalLM.from_pretrained(
            tmp, dtype=torch.float32, attn_implementation="eager")
        model.eval()
        records = []
        for name, text, ids in prompts(tokenizer):
            input_ids = torch.tensor([ids])
            with torch.no_grad():
                logits = model(input_ids).logits[0].float()
                logprobs = torch.log_softmax(logits, dim=-1)
                top = torch.topk(logprobs, TOP_K, dim=-1)
                gen = model.generate(
                    input_ids, attention_mask=torch.ones_like(input_ids), do_sample=False,
                    max_new_tokens=NUM_GREEDY, min_new_tokens=0, eos_token_id=None,
                    pad_token_id=0, output_scores=True, return_dict_in_generate=True)
            greedy = gen.sequences[0, len(ids):].tolist()
            assert len(greedy) == NUM_GREEDY, len(greedy)
            margins = []
            for scores in gen.scores:  # raw logits of each step (greedy: no processors change them)
                two = torch.topk(scores[0].float(), 2).values
                margins.append(round(float(two[0] - two[1]), 6))
            records.append({
                "name": name,
                "text": text,
                "token_ids": ids,
                "top_ids": top.indices.tolist(),
                "top_logprobs": [[round(v, 6) for v in row] for row in top.values.tolist()],
                "greedy_ids": greedy,
                "greedy_logit_margins": margins,
            })
            print(f"{name}: {len(ids)} tokens; greedy: {tokenizer.decode(greedy)!r}; "
                  f"smallest top-1/top-2 logit margin {min(margins):.4g}")
        golden = {
            "description": "HF transformers float32 eager top-20 logprobs at every prompt "
                           "position and 64 greedy tokens; see README.md",
            "model_file": os.path.basename(args.gguf),
            "model_sha256": sha256,
            "top_k": TOP_K,
            "num_greedy": NUM_GREEDY,
            "versions": {
                "python": platform.python_version(),
                "torch": torch.__version__,
                "transformers": transformers.__version__,
                "gguf": importlib.metadata.version("gguf"),
                "numpy": np.__version__,
            },
            "date": datetime.date.today().isoformat(),
            "config": config,
            "prompts": records,
        }
        os.makedirs(args.out, exist_ok=True)
        path = os.path.join(args.out, "golden.json")
        with open(path, "w") as f:
            json.dump(golden, f, separators=(",", ":"))
            f.write("\n")
        print(f"wrote {path} ({os.path.getsize(path)} bytes)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
