"""A tiny GGUF model file (a 2-layer Llama, width 8, a GPT-2 tokenizer of 42 tokens,
a few KB) written with the ``gguf`` package, and the damage the tests do to copies of it: header
values changed or removed (:func:`write_tiny_gguf`), counts patched in the bytes
(:func:`patch_count`)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np

#: the model's sizes as its header states them
LAYERS, WIDTH, FFN, HEADS, KV_HEADS = 2, 8, 16, 2, 1
TOKENS = ["<unk>", "<s>", "</s>", *"abcdefghijklmnopqrstuvwxyz0123456789", "Ġ", "ab", "cd"]
#: a key in ``overrides`` mapped to this is left out of the header
DROP = object()


def _header(arch: str) -> dict[str, Any]:
    return {
        f"{arch}.block_count": ("u32", LAYERS),
        f"{arch}.context_length": ("u32", 64),
        f"{arch}.embedding_length": ("u32", WIDTH),
        f"{arch}.feed_forward_length": ("u32", FFN),
        f"{arch}.attention.head_count": ("u32", HEADS),
        f"{arch}.attention.head_count_kv": ("u32", KV_HEADS),
        f"{arch}.attention.layer_norm_rms_epsilon": ("f32", 1e-5),
        f"{arch}.rope.freq_base": ("f32", 10000.0),
        f"{arch}.vocab_size": ("u32", len(TOKENS)),
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.tokens": TOKENS,
        "tokenizer.ggml.token_type": ("i32s", [3, 3, 3] + [1] * (len(TOKENS) - 3)),
        "tokenizer.ggml.merges": ["a b", "c d"],
        "tokenizer.ggml.bos_token_id": ("u32", 1),
        "tokenizer.ggml.eos_token_id": ("u32", 2),
        "tokenizer.ggml.unknown_token_id": ("u32", 0),
        "tokenizer.ggml.padding_token_id": ("u32", 2),
    }


def _tensors(layers: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    head = WIDTH // HEADS
    shapes = {"token_embd.weight": (len(TOKENS), WIDTH), "output_norm.weight": (WIDTH,)}
    for i in range(layers):
        shapes |= {
            f"blk.{i}.attn_norm.weight": (WIDTH,),
            f"blk.{i}.attn_q.weight": (WIDTH, WIDTH),
            f"blk.{i}.attn_k.weight": (KV_HEADS * head, WIDTH),
            f"blk.{i}.attn_v.weight": (KV_HEADS * head, WIDTH),
            f"blk.{i}.attn_output.weight": (WIDTH, WIDTH),
            f"blk.{i}.ffn_norm.weight": (WIDTH,),
            f"blk.{i}.ffn_gate.weight": (FFN, WIDTH),
            f"blk.{i}.ffn_up.weight": (FFN, WIDTH),
            f"blk.{i}.ffn_down.weight": (WIDTH, FFN),
        }
    return {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}


def write_tiny_gguf(
    path: Path,
    *,
    arch: str = "llama",
    prefix: str = "llama",
    overrides: dict[str, Any] | None = None,
    layers: int = LAYERS,
) -> Path:
    """Write the tiny model to ``path``. ``arch`` is what ``general.architecture`` says, ``prefix``
    the architecture the model's keys name (``llama.block_count``); ``overrides``: header keys set to another value
    (``("u32", n)``, ``("u64", n)``, a string) or left out (:data:`DROP`); ``layers``: the blocks
    whose tensors the file holds."""
    import gguf  # the model extra's GGUF reader and writer

    header = _header(prefix) | (overrides or {})
    writer = gguf.GGUFWriter(str(path), arch=arch)  # writes general.architecture itself
    for key, value in header.items():
        if value is DROP:
            continue
        if isinstance(value, str):
            writer.add_string(key, value)
        elif isinstance(value, list):
            writer.add_array(key, value)
        else:
            kind, number = value
            if kind == "i32s":
                writer.add_key_value(
                    key, number, gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.INT32
                )
            else:
                add = {
                    "u32": writer.add_uint32,
                    "u64": writer.add_uint64,
                    "f32": writer.add_float32,
                }
                add[kind](key, number)
    for name, tensor in _tensors(layers).items():
        writer.add_tensor(name, tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def patch_count(path: Path, where: str, value: int) -> None:
    """Overwrite a count in the file's bytes: ``tensor_count`` or ``kv_count`` (the header),
    ``key_length`` (the first key's length), ``ndims`` (the first tensor's number of dimensions)
    or ``tokens`` (the length of the token list)."""
    data = bytearray(path.read_bytes())
    if where in ("tensor_count", "kv_count"):
        offset, fmt = (8 if where == "tensor_count" else 16), "<Q"
    elif where == "key_length":
        offset, fmt = 24, "<Q"
    elif where == "ndims":
        name = b"token_embd.weight"
        offset, fmt = data.index(name) + len(name), "<I"
    elif where == "tokens":
        key = b"tokenizer.ggml.tokens"
        offset, fmt = data.index(key) + len(key) + 8, "<Q"  # after the value and item types
    else:
        raise ValueError(f"where: unknown count {where!r}")
    struct.pack_into(fmt, data, offset, value)
    path.write_bytes(bytes(data))
