#!/usr/bin/env python3
"""Writes the reference data for kiln's bit-exact dequantization test (src/model/dequant_test.cc).

    make_gguf_reference.py OUT_DIR [--model PATH]

Needs the `gguf` (0.19.0 was used to write the reference) and `numpy` packages.

OUT_DIR receives:
  <type>.gguf          one GGUF file per ggml type, written by gguf.GGUFWriter, holding tensors of
                       odd shapes (7 x 32, 83 x 96, 2 x 3 x 64 rows of 32-blocks; 7 x 256,
                       83 x 512, 2 x 3 x 256 for K-quants). Their bytes come from
                       gguf.quants.quantize where gguf can quantize the type, and otherwise (and
                       additionally, for every block type) from random bytes whose fp16 scale
                       fields are overwritten with random *finite* fp16 values (NaN or inf scales
                       would make a bitwise comparison meaningless). f16 and bf16 also get one
                       tensor holding all 65536 bit patterns, NaNs included.
  <type>/<tensor>.f32  the reference: gguf.quants.dequantize(bytes, type) as raw little-endian
                       float32, in element order. For i8, i16, i32, i64 and f64, which gguf does
                       not dequantize, the reference is numpy's astype(np.float32).
  manifest.json        what was written: files, tensors, kiln shapes, reference paths, versions.
  model_sha256.json    only with --model (or the KILN_DEFAULT_MODEL environment variable): the
                       sha256 of the numpy-dequantized float32 bytes of every tensor of that GGUF.

Everything is seeded; running the script twice writes identical files.
"""

import argparse
import hashlib
import json
import os
import sys

import numpy as np

import gguf
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize, quantize

SEED = 20261122

BLOCK32_SHAPES = [(7, 32), (83, 96), (2, 3, 64)]
BLOCK256_SHAPES = [(7, 256), (83, 512), (2, 3, 256)]

# Byte ranges of the fp16 scale fields inside one block (ggml-common.h layouts).
FP16_FIELDS = {
    Q.Q4_0: [0],
    Q.Q4_1: [0, 2],
    Q.Q5_0: [0],
    Q.Q5_1: [0, 2],
    Q.Q8_0: [0],
    Q.Q2_K: [80, 82],
    Q.Q3_K: [108],
    Q.Q4_K: [0, 2],
    Q.Q5_K: [0, 2],
    Q.Q6_K: [208],
}
QUANTIZABLE = {Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0}
NUMPY_CAST_TYPES = {Q.I8: np.int8, Q.I16: np.int16, Q.I32: np.int32, Q.I64: np.int64,
                    Q.F64: np.float64}


def finite_fp16_bits(rng, n):
    """n random fp16 bit patterns with an exponent below 31 (finite; subnormals included)."""
    bits = rng.integers(0, 1 << 16, size=n, dtype=np.uint16)
    exp = (bits >> 10) & 0x1F
    bits[exp == 0x1F] &= np.uint16(0xBFFF)  # clear the top exponent bit: finite
    return bits


def random_blocks(rng, qtype, shape):
    """Random bytes for `shape` elements of qtype, with finite fp16 scale fields."""
    block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
    rows = int(np.prod(shape[:-1]))
    n_blocks = rows * shape[-1] // block_size
    blocks = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    for off in FP16_FIELDS[qtype]:
        blocks[:, off:off + 2] = finite_fp16_bits(rng, n_blocks).view(np.uint8).reshape(-1, 2)
    return blocks.reshape(*shape[:-1], shape[-1] // block_size * type_size)


def tensors_for(rng, qtype):
    """[(name, array to write, raw_dtype or None, reference float32 array, source)]"""
    out = []
    if qtype in NUMPY_CAST_TYPES:
        np_type = NUMPY_CAST_TYPES[qtype]
        for shape in BLOCK32_SHAPES:
            if np_type == np.float64:
                arr = rng.standard_normal(shape) * 10.0 ** rng.integers(-40, 40, size=shape)
            else:
                info = np.iinfo(np_type)
                arr = rng.integers(info.min, info.max, size=shape, dtype=np_type, endpoint=True)
            arr = arr.astype(np_type)
            with np.errstate(over="ignore"):  # f64 beyond the f32 range becomes +-inf
                ref = arr.astype(np.float32)
            out.append((name_of(shape), arr, None, ref, "numpy-astype"))
        return out
    if qtype in (Q.F32, Q.F16, Q.BF16):
        for shape in BLOCK32_SHAPES:
            x = (rng.standard_normal(shape) * 3).astype(np.float32)
            raw = quantize(x, qtype).view(np.uint8)
            out.append((name_of(shape), raw, qtype, dequantize(raw, qtype), "quantize"))
        if qtype == Q.F32:
            raw = rng.integers(0, 256, size=(5, 128), dtype=np.uint8)  # any bits, NaNs included
            out.append(("random_5x32", raw, qtype, dequantize(raw, qtype), "random"))
        else:
            raw = np.arange(1 << 16, dtype=np.uint16).reshape(256, 256).view(np.uint8)
            out.append(("all_bits_256x256", raw, qtype, dequantize(raw, qtype), "all-bits"))
        return out
    shapes = BLOCK256_SHAPES if gguf.GGML_QUANT_SIZES[qtype][0] == 256 else BLOCK32_SHAPES
    for shape in shapes:
        if qtype in QUANTIZABLE:
            x = (rng.standard_normal(shape) * rng.uniform(0.01, 4)).astype(np.float32)
            raw = quantize(x, qtype)
            out.append(("quant_" + name_of(shape), raw, qtype, dequantize(raw, qtype), "quantize"))
        raw = random_blocks(rng, qtype, shape)
        out.append(("random_" + name_of(shape), raw, qtype, dequantize(raw, qtype), "random"))
    return out


def name_of(shape):
    return "x".join(str(d) for d in shape)


def write_types(out_dir):
    rng = np.random.default_rng(SEED)
    types = [Q.F32, Q.F16, Q.BF16, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.Q2_K, Q.Q3_K,
             Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.I8, Q.I16, Q.I32, Q.I64, Q.F64]
    files = []
    for qtype in types:
        type_name = qtype.name.lower()
        os.makedirs(os.path.join(out_dir, type_name), exist_ok=True)
        gguf_name = type_name + ".gguf"
        writer = gguf.GGUFWriter(os.path.join(out_dir, gguf_name), arch="kiln-ref")
        entries = []
        for name, arr, raw_dtype, ref, source in tensors_for(rng, qtype):
            assert ref.dtype == np.float32, (qtype, name)
            writer.add_tensor(name, arr, raw_dtype=raw_dtype)
            ref_path = os.path.join(type_name, name + ".f32")
            np.ascontiguousarray(ref).astype("<f4", copy=False).tofile(
                os.path.join(out_dir, ref_path))
            entries.append({"name": name, "shape": list(ref.shape), "ref": ref_path,
                            "source": source})
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        files.append({"gguf": gguf_name, "type": type_name, "tensors": entries})
    return files


def sha256_of_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_model_digests(out_dir, model_path):
    reader = gguf.GGUFReader(model_path)
    tensors = {}
    for t in reader.tensors:
        values = dequantize(t.data, t.tensor_type)
        data = np.ascontiguousarray(values, dtype="<f4").tobytes()
        tensors[t.name] = {
            "type": t.tensor_type.name.lower(),
            "num_elements": int(t.n_elements),
            "sha256": hashlib.sha256(data).hexdigest(),
        }
    doc = {
        "model": os.path.abspath(model_path),
        "file_size": os.path.getsize(model_path),
        "file_sha256": sha256_of_file(model_path),
        "tensors": tensors,
    }
    with open(os.path.join(out_dir, "model_sha256.json"), "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
    print(f"model: {len(tensors)} tensor digests for {model_path}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--model", default=os.environ.get("KILN_DEFAULT_MODEL"),
                        help="a GGUF whose per-tensor dequantized sha256 digests to record "
                             "(default: $KILN_DEFAULT_MODEL)")
    args = parser.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    stale = os.path.join(args.out_dir, "model_sha256.json")
    if os.path.exists(stale):
        os.remove(stale)
    files = write_types(args.out_dir)
    manifest = {
        "generator": "tests/model/make_gguf_reference.py",
        "gguf_version": getattr(gguf, "__version__", None) or _dist_version("gguf"),
        "numpy_version": np.__version__,
        "seed": SEED,
        "files": files,
    }
    with open(os.path.join(args.out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    n = sum(len(f["tensors"]) for f in files)
    print(f"wrote {len(files)} GGUF files, {n} reference tensors to {args.out_dir}")
    if args.model:
        if not os.path.isfile(args.model):
            sys.exit(f"--model {args.model}: no such file")
        write_model_digests(args.out_dir, args.model)


def _dist_version(name):
    try:
        from importlib.metadata import version
        return version(name)
    except Exception:  # noqa: BLE001 - best effort, informational only
        return None


if __name__ == "__main__":
    main()
