#!/usr/bin/env python3
"""Cross-check of strata's GGUF reader, writer and codecs against the `gguf` Python package.

The package implements the format and the block codecs on its own; this script only drives it.

    gguf_crosscheck.py write FILE SEED   write a GGUF with the package: metadata of every value type
                                         (nested arrays too) and random tensors of every type it knows
    gguf_crosscheck.py dump FILE OUTDIR  read FILE with the package; write OUTDIR/dump.json (metadata,
                                         tensor infos) and, per tensor, its raw bytes and the package's
                                         dequantization as little-endian f32

The Rust test crates/gguf/tests/python_crosscheck.rs runs both directions and compares bit for bit.
"""

import json
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader, GGUFValueType as V, GGUFWriter
from gguf.quants import dequantize

# Types strata knows (spec §10) that the package can also dequantize. Q2_0 (id 42) is strata's own.
SHARED_TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q5_0", "IQ4_NL", "IQ4_XS", "Q3_K", "Q4_K", "Q5_K",
                "Q6_K", "IQ2_XS", "IQ3_XXS", "IQ3_S", "Q4_1", "Q5_1", "Q2_K", "IQ2_XXS", "IQ2_S", "IQ1_M", "NVFP4",
                "TQ1_0", "TQ2_0"]

# Byte offsets of the fp16 scale fields in one block (from the ggml block layouts).
SCALE_FIELDS = {"Q4_K": [0, 2], "Q5_K": [0, 2], "Q3_K": [108], "Q6_K": [208], "Q4_1": [0, 2], "Q5_1": [0, 2],
                "Q2_K": [80, 82], "TQ1_0": [52], "TQ2_0": [64], "NVFP4": [], "IQ1_M": []}


def random_blocks(rng, qtype, n_blocks):
    """Random block bytes whose fp16 scales are finite (subnormals included)."""
    from gguf.constants import GGML_QUANT_SIZES
    _, type_size = GGML_QUANT_SIZES[qtype]
    b = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    for at in SCALE_FIELDS.get(qtype.name, [0]):
        mag = np.exp2(-20.0 * rng.random(n_blocks)) * np.where(rng.random(n_blocks) < 0.5, -1.0, 1.0)
        b[:, at:at + 2] = mag.astype(np.float16).view(np.uint8).reshape(n_blocks, 2)
    if qtype.name == "IQ1_M":  # the fp16 d sits in the top nibbles of the four scale words (bytes 48..56)
        mag = np.exp2(-20.0 * rng.random(n_blocks)) * np.where(rng.random(n_blocks) < 0.5, -1.0, 1.0)
        d = mag.astype(np.float16).view(np.uint16).astype(np.uint32)
        for i in range(4):
            b[:, 49 + 2 * i] = (b[:, 49 + 2 * i] & 0x0F) | (((d >> (4 * i)) & 0xF) << 4).astype(np.uint8)
    return b


def write(path, seed):
    rng = np.random.default_rng(seed)
    w = GGUFWriter(path, "qwen4exp")
    w.add_key_value("p.u8", 200, V.UINT8)
    w.add_key_value("p.i8", -100, V.INT8)
    w.add_key_value("p.u16", 65000, V.UINT16)
    w.add_key_value("p.i16", -32000, V.INT16)
    w.add_key_value("p.u32", 4000000000, V.UINT32)
    w.add_key_value("p.i32", -2000000000, V.INT32)
    w.add_key_value("p.f32", 0.1, V.FLOAT32)
    w.add_key_value("p.bool", False, V.BOOL)
    w.add_key_value("p.string", "naïve <|im_end|> 日本 🙂", V.STRING)
    w.add_key_value("p.u64", 2**64 - 2, V.UINT64)
    w.add_key_value("p.i64", -(2**63) + 1, V.INT64)
    w.add_key_value("p.f64", -2.5e-300, V.FLOAT64)
    w.add_key_value("p.arr_i32", [1, -2, 3], V.ARRAY, sub_type=V.INT32)
    w.add_key_value("p.arr_f32", [0.5, -1.25], V.ARRAY, sub_type=V.FLOAT32)
    w.add_key_value("p.arr_str", ["<|im_start|>", "Ġworld", "x"], V.ARRAY)
    w.add_key_value("p.arr_bool", [True, False, True], V.ARRAY, sub_type=V.BOOL)
    w.add_key_value("p.arr_u64", [0, 2**64 - 1], V.ARRAY, sub_type=V.UINT64)
    w.add_key_value("p.arr_arr", [[1, 2], [3]], V.ARRAY)
    for name in SHARED_TYPES:
        qtype = Q[name]
        from gguf.constants import GGML_QUANT_SIZES
        block, type_size = GGML_QUANT_SIZES[qtype]
        rows, ne0 = 3, (64 if block == 1 else 2 * block)
        if name == "F32":
            data = rng.standard_normal((rows, ne0)).astype(np.float32)
            w.add_tensor(f"p.{name.lower()}.weight", data)
        elif name == "F16":
            data = rng.standard_normal((rows, ne0)).astype(np.float16)
            w.add_tensor(f"p.{name.lower()}.weight", data)
        else:
            if name == "BF16":
                data = (rng.integers(0, 2**16, size=(rows, ne0)).astype(np.uint16) & 0x7f7f).view(np.uint8)
            else:
                data = random_blocks(rng, qtype, rows * ne0 // block).reshape(rows, -1)
            w.add_tensor(f"p.{name.lower()}.weight", data, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


SCALAR = {V.UINT8: np.uint8, V.INT8: np.int8, V.UINT16: np.uint16, V.INT16: np.int16, V.UINT32: np.uint32,
          V.INT32: np.int32, V.UINT64: np.uint64, V.INT64: np.int64, V.BOOL: np.bool_}


def decode(parts, i, vtype):
    """Rebuilds one value from the reader's flat list of parts; returns (json value, next index)."""
    if vtype == V.STRING:
        return {"t": "STRING", "v": bytes(parts[i + 1]).decode("utf-8")}, i + 2
    if vtype == V.ARRAY:
        sub = V(int(parts[i][0]))
        n = int(parts[i + 1][0])
        i += 2
        items = []
        for _ in range(n):
            item, i = decode(parts, i, sub)
            items.append(item)
        return {"t": "ARRAY", "sub": sub.name, "v": items}, i
    if vtype == V.FLOAT32:
        return {"t": "FLOAT32", "bits": int(parts[i].view(np.uint32)[0])}, i + 1
    if vtype == V.FLOAT64:
        return {"t": "FLOAT64", "bits": int(parts[i].view(np.uint64)[0])}, i + 1
    v = parts[i][0]
    return {"t": vtype.name, "v": bool(v) if vtype == V.BOOL else int(v)}, i + 1


def dump(path, outdir):
    os.makedirs(outdir, exist_ok=True)
    r = GGUFReader(path)
    meta = []
    for key, field in r.fields.items():
        if key.startswith("GGUF."):
            continue  # the reader's own entries for the header counts
        # parts: key length, key bytes, value type, then the value's parts
        value, end = decode(field.parts, 3, V(int(field.parts[2][0])))
        assert end == len(field.parts), key
        meta.append([key, value])
    tensors = []
    for t in r.tensors:
        raw = np.asarray(t.data).tobytes()
        fname = t.name.replace("/", "_")
        with open(os.path.join(outdir, fname + ".raw"), "wb") as f:
            f.write(raw)
        deq = None
        if t.tensor_type.name in SHARED_TYPES:
            values = dequantize(np.asarray(t.data), t.tensor_type).astype("<f4", copy=False).ravel()
            deq = fname + ".f32"
            with open(os.path.join(outdir, deq), "wb") as f:
                f.write(values.tobytes())
        tensors.append({"name": t.name, "type": int(t.tensor_type), "shape": [int(d) for d in t.shape],
                        "raw": fname + ".raw", "deq": deq})
    with open(os.path.join(outdir, "dump.json"), "w") as f:
        json.dump({"metadata": meta, "tensors": tensors}, f)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "write":
        write(sys.argv[2], int(sys.argv[3]))
    elif len(sys.argv) == 4 and sys.argv[1] == "dump":
        dump(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
