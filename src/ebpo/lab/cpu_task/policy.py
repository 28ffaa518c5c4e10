"""The policy a job starts from: the built-in tiny model with a supervised warm start (cached on
disk), or a pretrained causal LM.

The built-in model is a randomly initialised two-layer Llama with a character-level tokenizer
(:func:`ebpo.evaluation.models.build_tiny_llama`); nothing is downloaded. Its warm start is supervised
learning on training problems, first with clean answers (it learns the algorithm), then with
answers **corrupted in one digit half of the time** (it learns not to trust it, and samples a wrong
digit now and then). RL can fix exactly that, and because the skill is an algorithm rather than
memorised facts, the fix transfers to held-out problems. (The examples come from
:mod:`ebpo.lab.train.data`; this module trains on whatever it is given.)

A warm start is cached under ``<cache>/warm-start/<key>`` where ``key`` hashes everything it
depends on (:func:`warm_start_key`), so every method of a seed in ``ebpo bench`` starts from the
same weights and a second ``ebpo train`` skips it.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import random
import re
import shutil
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from ebpo.evaluation import models
from ebpo.lab.cpu_task.task import corrupt_digit

__all__ = [
    "BUILTIN_MODEL",
    "cache_dir",
    "load_policy",
    "remove_stale_warm_starts",
    "warm_start",
    "warm_start_is_cached",
    "warm_start_key",
    "warm_start_path",
]

#: ``--model`` value of the built-in model (tiny Llama + character tokenizer + cached warm start)
BUILTIN_MODEL = "tiny"
#: bump when the warm-start code or the built-in task changes, so old caches are not reused
_WARM_START_VERSION = 4
#: the temporary folder a warm start is saved to before it is renamed into place (a key, a pid)
_TEMPORARY = re.compile(r"\.([0-9a-f]{16})\.tmp[0-9]+")


def cache_dir(explicit: str | None = None) -> Path:
    """Where warm starts are cached: ``explicit``, ``$EBPO_CACHE`` or ``~/.cache/ebpo``."""
    return Path(explicit or os.environ.get("EBPO_CACHE") or "~/.cache/ebpo").expanduser()


def load_policy(
    model: str,
    *,
    tiny_layers: int = 2,
    tiny_hidden_size: int = 128,
    tiny_heads: int = 4,
    seed: int = 0,
):
    """``(model, tokenizer)`` before any training: the built-in tiny model initialised from
    ``seed``, or a pretrained model (hub id, local directory, ``.gguf``, ``smollm2-135m``)."""
    if model == BUILTIN_MODEL:
        tokenizer = models.build_char_tokenizer()
        policy = models.build_tiny_llama(
            tokenizer,
            num_layers=tiny_layers,
            hidden_size=tiny_hidden_size,
            num_heads=tiny_heads,
            max_position_embeddings=1024,
            seed=seed,
        )
        return policy, tokenizer
    # the lab trains on the CPU (use_cpu), in float32, whatever GPU the machine has
    return models.load_model_and_tokenizer(model, dtype=torch.float32, device="cpu")


def warm_start_key(recipe: Mapping[str, Any]) -> str:
    """A short hash of everything a warm start depends on (``recipe`` must be JSON-serialisable)."""
    text = json.dumps({"version": _WARM_START_VERSION, **recipe}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def warm_start_path(cache: Path, recipe: Mapping[str, Any]) -> Path:
    """Where the warm start of ``recipe`` is cached (see :func:`warm_start_is_cached`)."""
    return cache / "warm-start" / warm_start_key(recipe)


def warm_start_is_cached(path: Path) -> bool:
    """Whether the warm start at ``path`` is complete: it is renamed into place whole, so its
    ``config.json`` being there means it can be loaded."""
    return (path / "config.json").is_file()


def warm_start(
    model: Any,
    tokenizer: Any,
    examples: Iterator[tuple[str, str]],
    *,
    steps: int,
    batch_size: int,
    lr: float,
    seed: int,
    cache: Path | None,
    recipe: Mapping[str, Any],
    progress: bool = True,
    on_locked: Callable[[], None] | None = None,
    train: bool = True,
) -> tuple[Any, bool]:
    """Supervised warm start, cached: ``(model, loaded_from_cache)``.

    ``examples`` yields ``(prompt, completion)`` texts without end; each step takes
    ``batch_size`` of them. The loss is cross-entropy on the completion tokens and the EOS after
    them (not on the prompt); AdamW with a one-cycle schedule peaking at ``lr``; gradients clipped
    at norm 1. With ``cache`` set, the result is saved to ``cache/warm-start/<key of recipe>``
    (written to a temporary directory, then renamed) and loaded from there next time.

    One process trains a given warm start while the others wait on the cache entry's lock, then
    load it. ``on_locked()`` is called once this process holds that lock (the main process of a
    launch releases the other processes there, so that they queue behind it); ``train=False``
    only loads: ValueError when the entry is still missing once the lock is free (the process
    that was to train it did not).
    """
    from transformers import AutoModelForCausalLM  # optional heavy dependency (trl extra)

    supervised = functools.partial(
        _supervised,
        model,
        tokenizer,
        examples,
        steps=steps,
        batch_size=batch_size,
        lr=lr,
        seed=seed,
        progress=progress,
    )
    if cache is None:
        if not train:
            raise ValueError("warm_start(train=False) needs a cache to load from")
        supervised()
        return model, False
    path = warm_start_path(cache, recipe)
    path.parent.mkdir(parents=True, exist_ok=True)
    # One process trains a given warm start; others (bench shards, the other processes of a
    # launch) wait for it, then load it.
    with open(_lock_path(path), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if on_locked is not None:
            on_locked()
        remove_stale_warm_starts(path.parent, holding=path.name)
        if warm_start_is_cached(path):
            return AutoModelForCausalLM.from_pretrained(path), True
        if not train:
            raise ValueError(
                f"the warm start {str(path)!r} is not in the cache: the process that was to "
                "train it did not"
            )
        supervised()
        tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        model.save_pretrained(tmp)
        (tmp / "recipe.json").write_text(json.dumps(dict(recipe), default=str, indent=2))
        os.replace(tmp, path)
    return model, False


def _lock_path(path: Path) -> Path:
    """The lock a process holds while it trains (or loads) the warm start at ``path``."""
    return path.parent / f".{path.name}.lock"


def remove_stale_warm_starts(folder: Path, holding: str | None = None) -> list[Path]:
    """Remove the temporary folders (``.<key>.tmp<pid>``) that a warm start killed while it saved
    left in the cache ``folder``; returns what went. A key's temporary folder is only written while
    its lock is held, so it is stale once the lock is free: ``holding`` is the key whose lock this
    process holds; any other key's is tried without waiting and skipped while another process
    holds it. Nothing else in the folder is touched."""
    removed = []
    for entry in sorted(folder.iterdir()) if folder.is_dir() else []:
        match = _TEMPORARY.fullmatch(entry.name)
        if not match or entry.is_symlink() or not entry.is_dir():
            continue
        key = match.group(1)
        if key == holding:
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
            continue
        with open(_lock_path(folder / key), "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # another process is training that warm start now
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def _supervised(
    model: Any,
    tokenizer: Any,
    examples: Iterator[tuple[str, str]],
    *,
    steps: int,
    batch_size: int,
    lr: float,
    seed: int,
    progress: bool,
) -> None:
    eos, pad = tokenizer.eos_token or "", tokenizer.pad_token_id
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    if steps >= 10:
        schedule: torch.optim.lr_scheduler.LRScheduler = torch.optim.lr_scheduler.OneCycleLR(
            optimizer, max_lr=lr, total_steps=steps, pct_start=0.1
        )
    else:  # too short for a warm-up and a decay (tests, smoke runs)
        schedule = torch.optim.lr_scheduler.ConstantLR(optimizer, factor=1.0)
    model.train()
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        bar = tqdm(range(steps), desc="warm start (supervised)", disable=not progress)
        for _ in bar:
            batch = []
            for _, (prompt, completion) in zip(range(batch_size), examples, strict=False):
                p = tokenizer(prompt, add_special_tokens=False)["input_ids"]
                c = tokenizer(completion + eos, add_special_tokens=False)["input_ids"]
                batch.append((p + c, [-100] * len(p) + c))
            width = max(len(ids) for ids, _ in batch)
            input_ids = torch.tensor([ids + [pad] * (width - len(ids)) for ids, _ in batch])
            labels = torch.tensor([lab + [-100] * (width - len(lab)) for _, lab in batch])
            attention = torch.tensor(
                [[1] * len(ids) + [0] * (width - len(ids)) for ids, _ in batch]
            )
            loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad(set_to_none=True)
            bar.set_postfix(loss=f"{loss.item():.3f}", refresh=False)


def corrupted_examples(
    pairs: Iterator[tuple[str, str]], corrupt_frac: float, seed: int
) -> Iterator[tuple[str, str]]:
    """``pairs`` with the completion's digits corrupted (:func:`ebpo.lab.cpu_task.task.corrupt_digit`) in
    a ``corrupt_frac`` share of them, chosen at random (seeded)."""
    rng = random.Random(f"corrupt:{seed}")
    for prompt, completion in pairs:
        yield prompt, corrupt_digit(completion, rng) if rng.random() < corrupt_frac else completion
