#!/usr/bin/env python3
"""Checks the safetensors checkpoints that `kiln synth` writes, with the HF `safetensors`
package and numpy (references nobody here wrote).

Writes a SmolLM2-135M-shaped checkpoint cut to 2 layers twice: in f16 split into several shards
(--max-shard-size 30MB), and in bf16 as one model.safetensors. Then checks:
  - every file loads (safetensors.numpy.load_file for f16; safe_open for the bf16 metadata, since
    numpy has no bfloat16, and the raw bytes read through the header);
  - the tensor names and shapes are exactly those HF LlamaForCausalLM expects for config.json
    (computed here independently), no more, no less; the parameter count matches;
  - model.safetensors.index.json maps every tensor to the shard that holds it, and its
    total_size is the sum of the tensors' bytes;
  - norms are exactly 1; other tensors have mean ~0 and std ~0.02;
  - the values equal a numpy re-implementation of the documented generator
    (src/builder/normal_fill.h), bit for bit, in both dtypes.

Usage: check_synth_safetensors.py --kiln PATH/TO/kiln --work-dir DIR
Exit 0 on success, 1 on a failed check, 77 (skipped) when safetensors or numpy is missing.
"""
import argparse
import json
import os
import subprocess
import sys

SEED = 7
STD = 0.02


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def expected_weights(config):
    """Name -> shape, as transformers' LlamaForCausalLM names them."""
    h, inter, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim") or h // heads
    w = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,)}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = (h,)
        w[p + "post_attention_layernorm.weight"] = (h,)
        w[p + "self_attn.q_proj.weight"] = (heads * head_dim, h)
        w[p + "self_attn.k_proj.weight"] = (kv * head_dim, h)
        w[p + "self_attn.v_proj.weight"] = (kv * head_dim, h)
        w[p + "self_attn.o_proj.weight"] = (h, heads * head_dim)
        w[p + "mlp.gate_proj.weight"] = (inter, h)
        w[p + "mlp.up_proj.weight"] = (inter, h)
        w[p + "mlp.down_proj.weight"] = (h, inter)
    if not config["tie_word_embeddings"]:
        w["lm_head.weight"] = (v, h)
    return w


def reference_normal(np, seed, name, count):
    """Elements [0, count) of the stream of `name`: the generator of normal_fill.h in numpy
    float32 (only +, -, *, /, sqrt, each correctly rounded, in the same order)."""
    u64, u32, f32 = np.uint64, np.uint32, np.float32
    m64 = (1 << 64) - 1

    def mix(z):
        z = (z ^ (z >> u64(30))) * u64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> u64(27))) * u64(0x94D049BB133111EB)
        return z ^ (z >> u64(31))

    h = 0xCBF29CE484222325
    for b in name.encode():
        h = ((h ^ b) * 0x100000001B3) & m64
    key = int(mix(np.array([seed], dtype=u64))[0]) ^ h
    key = mix(np.array([key], dtype=u64))[0]
    with np.errstate(over="ignore"):
        pairs = np.arange(1, (count + 1) // 2 + 1, dtype=u64)
        bits = mix(key + pairs * u64(0x9E3779B97F4A7C15))
    hi = (bits >> u64(40)).astype(u32)
    lo = (bits & u64(0xFFFFFF)).astype(u32)

    u1 = (hi + u32(1)).astype(f32) * f32(1 / 16777216)
    ix = u1.view(u32) + u32(0x3F800000 - 0x3F3504F3)
    e = ((ix >> u32(23)).astype(np.int32) - 0x7F).astype(f32)
    m = ((ix & u32(0x7FFFFF)) + u32(0x3F3504F3)).view(f32)
    s = (m - f32(1)) / (m + f32(1))
    s2 = s * s
    series = f32(1) + s2 * (f32(1 / 3) + s2 * (f32(1 / 5) + s2 * (f32(1 / 7) + s2 * f32(1 / 9))))
    log_u1 = e * f32(0.693147180559945309) + f32(2) * s * series
    r = f32(STD) * np.sqrt(f32(-2) * log_u1)

    q = lo >> u32(22)
    d = ((lo & u32(0x3FFFFF)).astype(f32) * f32(1 / 4194304) - f32(0.5)) * f32(1.57079632679489662)
    d2 = d * d
    sin = d * (f32(1) - d2 * (f32(1 / 6) - d2 * (f32(1 / 120) - d2 * (f32(1 / 5040)
                                                                      - d2 * f32(1 / 362880)))))
    cos = f32(1) - d2 * (f32(0.5) - d2 * (f32(1 / 24) - d2 * (f32(1 / 720) - d2 * (
        f32(1 / 40320) - d2 * f32(1 / 3628800)))))
    odd = (q & u32(1)) == 1
    x, y = np.where(odd, sin, cos), np.where(odd, cos, sin)
    cos_sign = ((q ^ (q >> u32(1))) & u32(1)) << u32(31)
    sin_sign = (q >> u32(1)) << u32(31)
    z0 = r * (x.view(u32) ^ cos_sign).view(f32)
    z1 = r * (y.view(u32) ^ sin_sign).view(f32)
    return np.stack([z0, z1], axis=1).reshape(-1)[:count]


def to_bf16_bits(np, x):
    """Round-to-nearest-even f32 -> bf16 bit patterns (finite inputs)."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def read_raw(path):
    """name -> (dtype, shape, bytes), parsing the file by the format spec."""
    data = open(path, "rb").read()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    if (8 + n) % 8 != 0:
        fail(f"{path}: data section starts at {8 + n}, not a multiple of 8")
    body = data[8 + n:]
    out, spans = {}, []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        spans.append((b, e))
        out[name] = (info["dtype"], tuple(info["shape"]), body[b:e])
    spans.sort()
    at = 0
    for b, e in spans:
        if b != at:
            fail(f"{path}: gap or overlap at data offset {at}")
        at = e
    if at != len(body):
        fail(f"{path}: data section is {len(body)} bytes, tensors cover {at}")
    return out


def check_values(np, name, values, shape):
    if name.endswith("norm.weight"):
        if not np.all(values == 1.0):
            fail(f"{name}: norm is not all ones")
        return
    if values.size >= 100000:
        mean, std = float(values.astype(np.float64).mean()), float(values.astype(np.float64).std())
        if abs(mean) > 5e-4 or abs(std - STD) > 5e-4:
            fail(f"{name}: mean {mean}, std {std}")
    if not np.all(np.isfinite(values)) or np.abs(values).max() > 6 * STD:
        fail(f"{name}: values outside +-6 std")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--kiln", required=True)
    parser.add_argument("--work-dir", required=True)
    args = parser.parse_args()
    try:
        import numpy as np
        from safetensors import safe_open
        from safetensors.numpy import load_file
    except ImportError as e:
        print(f"SKIP: {e}")
        sys.exit(77)

    f16_dir = os.path.join(args.work_dir, "f16")
    bf16_dir = os.path.join(args.work_dir, "bf16")
    common = [args.kiln, "synth", "--preset", "smollm2-135m", "--num-layers", "2",
              "--seed", str(SEED), "--force"]
    subprocess.run(common + ["--dtype", "f16", "--max-shard-size", "30MB", "--out", f16_dir],
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run(common + ["--out", bf16_dir], check=True, stdout=subprocess.DEVNULL)

    config = json.load(open(os.path.join(f16_dir, "config.json")))
    expected = expected_weights(config)
    num_params = sum(int(np.prod(s)) for s in expected.values())

    # f16, sharded: the index and every shard through safetensors.numpy.load_file.
    index = json.load(open(os.path.join(f16_dir, "model.safetensors.index.json")))
    shards = sorted(set(index["weight_map"].values()))
    if len(shards) < 2 or shards[0] != f"model-00001-of-{len(shards):05d}.safetensors":
        fail(f"unexpected shard names {shards}")
    f16 = {}
    for shard in shards:
        tensors = load_file(os.path.join(f16_dir, shard))
        for name, t in tensors.items():
            if index["weight_map"].get(name) != shard:
                fail(f"{name} is in {shard} but the index says {index['weight_map'].get(name)}")
            if t.dtype != np.float16:
                fail(f"{name}: dtype {t.dtype}")
            f16[name] = t
    if set(f16) != set(expected) or set(index["weight_map"]) != set(expected):
        fail(f"tensor names differ from LlamaForCausalLM's: {set(f16) ^ set(expected)}")
    for name, shape in expected.items():
        if f16[name].shape != shape:
            fail(f"{name}: shape {f16[name].shape}, expected {shape}")
        check_values(np, name, f16[name].astype(np.float32), shape)
    if sum(t.size for t in f16.values()) != num_params:
        fail("parameter count")
    if index["metadata"]["total_size"] != 2 * num_params:
        fail(f"index total_size {index['metadata']['total_size']} != {2 * num_params}")

    # bf16, one file: the metadata through safe_open, the values through the raw bytes.
    path = os.path.join(bf16_dir, "model.safetensors")
    if os.path.exists(os.path.join(bf16_dir, "model.safetensors.index.json")):
        fail("a single-file checkpoint has an index")
    with safe_open(path, framework="numpy") as st:
        if st.metadata() != {"format": "pt"}:
            fail(f"metadata {st.metadata()}")
        keys = set(st.keys())
        for k in keys:
            if tuple(st.get_slice(k).get_shape()) != expected[k] or st.get_slice(k).get_dtype() != "BF16":
                fail(f"{k}: safe_open shape/dtype")
    if keys != set(expected):
        fail("bf16 tensor names")
    raw = read_raw(path)
    for name, (dtype, shape, data) in raw.items():
        bits = np.frombuffer(data, dtype=np.uint16)
        values = (bits.astype(np.uint32) << 16).view(np.float32)
        check_values(np, name, values, shape)

    # Bit-exact against the numpy generator, in both dtypes.
    for name, count in [("model.layers.1.self_attn.k_proj.weight", None),
                        ("model.layers.0.mlp.down_proj.weight", None),
                        ("model.embed_tokens.weight", 1 << 20)]:
        n = count or int(np.prod(expected[name]))
        ref = reference_normal(np, SEED, name, n)
        got_f16 = f16[name].reshape(-1)[:n]
        if not np.array_equal(got_f16.view(np.uint16), ref.astype(np.float16).view(np.uint16)):
            bad = int(np.argmax(got_f16 != ref.astype(np.float16)))
            fail(f"{name}: f16 element {bad} is {got_f16[bad]}, the reference gives {ref[bad]}")
        got_bf16 = np.frombuffer(raw[name][2], dtype=np.uint16)[:n]
        if not np.array_equal(got_bf16, to_bf16_bits(np, ref)):
            fail(f"{name}: bf16 differs from the reference generator")
    print(f"ok: {len(expected)} tensors, {num_params} parameters, {len(shards)} f16 shards, "
          "values match the reference generator")


if __name__ == "__main__":
    main()
