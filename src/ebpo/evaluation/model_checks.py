"""A model file checked before it is trained or evaluated: a GGUF file against what its own
header says, before transformers allocates anything (:func:`check_gguf_file`), and any model after
it loaded, for weights it did not find in the file (:func:`check_loaded_weights`).

transformers builds a model from a GGUF header's numbers and fills it with the tensors it finds;
what it does not find stays random, with only a table on stderr. A header that lies — a
``block_count`` of 2^31 (a model of 8 GB and more, then ``MemoryError``), an architecture the
tensors are not of (``mamba`` over a Llama's tensors), ``block_count`` left out (transformers' default
of 32 layers over a file of 30) or 0, no ``tokenizer.ggml.model`` (every space becomes token 0),
an ``embedding_length`` or ``vocab_size`` that is not the embedding's — and counts that break the
``gguf`` reader itself (``IndexError``) are each refused in one line naming the file and what is
wrong, before any tensor is read.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable
from typing import Any

import torch

__all__ = ["check_gguf_file", "check_loaded_weights", "tied_missing_keys"]

#: header keys every GGUF model needs, ``{arch}`` its architecture
_REQUIRED_KEYS = ("{arch}.block_count", "{arch}.embedding_length")
_TOKENIZER_KEYS = ("tokenizer.ggml.model", "tokenizer.ggml.tokens")
_TOKEN_ID_KEYS = ("bos_token_id", "eos_token_id", "unknown_token_id", "padding_token_id")
_BLOCK = re.compile(r"blk\.(\d+)\.(.+)")


def check_gguf_file(path: str | os.PathLike[str]) -> None:
    """Raise ValueError (one line naming ``path``) unless the GGUF file's header and tensors agree:
    it reads (the ``gguf`` package's reader raises nothing); it names an architecture the ``gguf``
    package knows, with ``{arch}.block_count`` and ``{arch}.embedding_length``, a tokenizer
    (``tokenizer.ggml.model``, ``tokenizer.ggml.tokens``, token ids inside the vocabulary, a
    ``{arch}.vocab_size`` equal to the vocabulary); every tensor is one that architecture has; the
    blocks are exactly ``blk.0`` to ``blk.{block_count - 1}``, each with the tensors of ``blk.0``;
    ``token_embd.weight`` is vocabulary × embedding_length and ``ffn_up`` (when present)
    feed_forward_length × embedding_length. Read once per file version (path, size, mtime)."""
    stat = os.stat(path)
    _check_gguf(os.fspath(path), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _check_gguf(path: str, size: int, mtime_ns: int) -> None:
    fields, tensors = _read(path)
    problem = _header_problem(fields) or _tensor_problem(fields, tensors)
    if problem:
        raise ValueError(
            f"GGUF file {path!r} does not hold the model its header describes: {problem}"
        )


def _read(path: str) -> tuple[dict[str, Any], dict[str, tuple[int, ...]]]:
    """``(header values, tensor name -> shape in numpy order)``; ValueError if the reader fails."""
    import gguf  # optional heavy dependency (the model extra)

    try:
        reader = gguf.GGUFReader(path, "r")
        fields = {name: field.contents() for name, field in reader.fields.items()}
        tensors = {
            t.name: tuple(int(n) for n in reversed(t.shape.tolist())) for t in reader.tensors
        }
    except (
        Exception
    ) as error:  # the reader's own errors on damaged counts: IndexError, ValueError, ...
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise ValueError(
            f"GGUF file {path!r} is damaged: the gguf reader fails on it "
            f"({type(error).__name__}{': ' + first[:200] if first else ''})"
        ) from error
    return fields, tensors


def _count(fields: dict[str, Any], key: str, low: int = 1) -> int | str:
    value = fields.get(key)
    if value is None:
        return f"{key} is missing"
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        return f"{key} must be an integer >= {low}, got {value!r}"
    return value


def _header_problem(fields: dict[str, Any]) -> str | None:
    import gguf  # optional heavy dependency (the model extra)

    arch = fields.get("general.architecture")
    if not isinstance(arch, str) or arch not in gguf.MODEL_ARCH_NAMES.values():
        return f"general.architecture {arch!r} is not an architecture the gguf package knows"
    prefixes = sorted(
        {key.split(".")[0] for key in fields if key.endswith(".block_count")} - {arch}
    )
    for key in (k.format(arch=arch) for k in _REQUIRED_KEYS):
        if key not in fields:
            other = f" (its keys are for {', '.join(map(repr, prefixes))})" if prefixes else ""
            return f"general.architecture is {arch!r} but {key} is missing{other}"
        count = _count(fields, key)
        if isinstance(count, str):
            return count
    for key in _TOKENIZER_KEYS:
        if key not in fields:
            return f"{key} is missing: the tokenizer cannot be rebuilt"
    tokens = fields["tokenizer.ggml.tokens"]
    if not isinstance(fields["tokenizer.ggml.model"], str):
        return "tokenizer.ggml.model must be a string"
    if not isinstance(tokens, list) or not tokens or not all(isinstance(t, str) for t in tokens):
        return "tokenizer.ggml.tokens must be a non-empty list of strings"
    vocab = fields.get(f"{arch}.vocab_size")
    if vocab is not None and vocab != len(tokens):
        return (
            f"{arch}.vocab_size is {vocab!r} but tokenizer.ggml.tokens holds {len(tokens)} tokens"
        )
    for name in _TOKEN_ID_KEYS:
        value = fields.get(f"tokenizer.ggml.{name}")
        if value is not None and not (isinstance(value, int) and 0 <= value < len(tokens)):
            return f"tokenizer.ggml.{name} {value!r} is not a token id (0 to {len(tokens) - 1})"
    return None


def _tensor_problem(fields: dict[str, Any], tensors: dict[str, tuple[int, ...]]) -> str | None:
    import gguf  # optional heavy dependency (the model extra)

    arch = fields["general.architecture"]
    known = _tensor_names(gguf, arch)
    for name in tensors:
        if not known.fullmatch(name):
            return f"tensor {name!r} is not one a {arch!r} model has"
    blocks: dict[int, set[str]] = {}
    for name in tensors:
        match = _BLOCK.fullmatch(name)
        if match:
            blocks.setdefault(int(match[1]), set()).add(match[2])
    declared = fields[f"{arch}.block_count"]
    if len(blocks) != declared or max(blocks) != declared - 1:  # keys 0 .. declared - 1
        held = f"blk.0 to blk.{max(blocks)}" if blocks else "none"
        return f"{arch}.block_count is {declared} but the file holds the tensors of {len(blocks)} blocks ({held})"
    for index, kinds in blocks.items():
        if kinds != blocks[0]:
            return f"blk.{index} lacks {sorted(blocks[0] - kinds) or sorted(kinds - blocks[0])}"
    width, vocab = fields[f"{arch}.embedding_length"], len(fields["tokenizer.ggml.tokens"])
    embedding = tensors.get("token_embd.weight")
    if embedding != (vocab, width):
        return (
            f"token_embd.weight is {embedding} but the header says {vocab} tokens × "
            f"{arch}.embedding_length {width}"
        )
    ffn, up = fields.get(f"{arch}.feed_forward_length"), tensors.get("blk.0.ffn_up.weight")
    if ffn is not None and up is not None and up != (ffn, width):
        return f"blk.0.ffn_up.weight is {up} but the header says {arch}.feed_forward_length {ffn} × {width}"
    return None


def _tensor_names(gguf: Any, arch: str) -> re.Pattern[str]:
    """The tensor names a model of ``arch`` may hold (gguf's table), weights and biases."""
    (kind,) = [k for k, name in gguf.MODEL_ARCH_NAMES.items() if name == arch]
    bases = [
        re.escape(gguf.TENSOR_NAMES[tensor]).replace(re.escape("{bid}"), r"\d+")
        for tensor in gguf.MODEL_TENSORS.get(kind, [])
    ]
    return re.compile(rf"(?:{'|'.join(bases) or '(?!)'})\.(?:weight|bias)")


def tied_missing_keys(model: torch.nn.Module, missing: Iterable[str]) -> list[str]:
    """The keys of ``missing`` whose tensor ``model`` shares with a key that was loaded (tied
    weights: loading the other name filled this one too)."""
    missing = list(missing)
    names_of: dict[int, list[str]] = {}  # a tensor -> its names (a tied one has several)
    for name, tensor in model.state_dict(keep_vars=True).items():
        names_of.setdefault(id(tensor), []).append(name)
    absent = set(missing)
    tied = {
        name
        for names in names_of.values()
        if any(n not in absent for n in names)
        for name in names
        if name in absent
    }
    return [key for key in missing if key in tied]


def check_loaded_weights(model: torch.nn.Module, loading_info: dict[str, Any], source: str) -> None:
    """Raise ValueError (one line naming ``source``) when transformers' loading report
    (``from_pretrained(..., output_loading_info=True)``) says weights were not in the file, or
    did not fit their parameter: such a model would train or answer with random weights. Tied
    weights loaded under their other name do not count."""
    missing = set(loading_info.get("missing_keys") or ())
    missing -= set(tied_missing_keys(model, missing))
    mismatched = [
        str(key[0] if isinstance(key, tuple) else key)
        for key in loading_info.get("mismatched_keys") or ()
    ]
    if missing or mismatched:
        names = sorted(missing) + mismatched
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        raise ValueError(
            f"model {source!r} loads with {len(names)} weights that its file does not hold "
            f"(they would be random): {shown}"
        )
